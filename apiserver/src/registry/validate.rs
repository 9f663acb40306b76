//! The seam between the registry and [`crate::validation`]: strategies and the store name
//! validation only through this module.

pub use crate::validation::*;
