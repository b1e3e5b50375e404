//! Emits pyo3's configuration cfgs for this crate (`Py_GIL_DISABLED` on a
//! free-threaded interpreter), which src/decision.rs reads.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
