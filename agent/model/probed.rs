//! [`Probed`]: a value a probe read, or why it could not be read.

use crate::root::ReadError;

/// A probed value or why it could not be read.
pub type Probed<T> = Result<T, ReadError>;
