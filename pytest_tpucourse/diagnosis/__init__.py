"""Why a graded result is wrong: evidence gathered by running the failing call again."""
