//! The C ABI of sluicegate.
