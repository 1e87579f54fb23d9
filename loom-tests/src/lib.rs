//! Holder crate: the loom tests live in `tests/`.
