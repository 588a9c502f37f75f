//! Plain data shared by the stages: no I/O, no policy.

pub mod action;
