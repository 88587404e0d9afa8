"""The original Matchbox name of :mod:`matchbox.testing`."""

from matchbox.testing import assert_examples_close, mb_assert, mb_rand, mb_test

__all__ = ["mb_rand", "mb_test", "mb_assert", "assert_examples_close"]
