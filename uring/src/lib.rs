//! uring
