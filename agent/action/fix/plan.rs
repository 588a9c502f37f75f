//! The plan of a fix: steps per finding, or why there is no automatic fix.
