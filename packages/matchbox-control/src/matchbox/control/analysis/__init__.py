"""Static analysis of a function for the rewriting: names, liveness, definite assignment."""
