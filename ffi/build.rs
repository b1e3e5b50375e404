//! Gives `libsluicegate_ffi.so` its ELF SONAME, `libsluicegate.so.<ABI>`.
//!
//! # The ABI versioning rule
//! `ABI` is the C ABI's major version, not the crate's version. It changes only
//! when a program built against an older header could misbehave with the new
//! library: a function removed or its signature or meaning changed, a struct's
//! layout changed (other than a versioned input struct growing at its end), an
//! enum value or status number given another meaning. Adding functions, enum
//! values, status codes and trailing fields of versioned input structs keeps it.
//! `scripts/install-c` installs `libsluicegate.so.<crate version>` with the
//! symlinks `libsluicegate.so.<ABI>` (what programs load) and `libsluicegate.so`
//! (what `-lsluicegate` links), reading the SONAME back from the built library.
//!
//! Nothing is written anywhere: the build script only passes a linker flag.

/// The C ABI's major version (see the module docs for when it changes).
const ABI: u32 = 0;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // `-soname` is a GNU ld / lld / gold flag for ELF shared objects; other
    // targets (Mach-O, PE) name their libraries differently and get nothing.
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let elf = matches!(
        os.as_str(),
        "linux"
            | "android"
            | "freebsd"
            | "netbsd"
            | "openbsd"
            | "dragonfly"
            | "illumos"
            | "solaris"
    );
    if elf {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsluicegate.so.{ABI}");
    }
}
