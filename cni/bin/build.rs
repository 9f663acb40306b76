//! Link the plugin as a static executable with no C runtime: `src/rt.rs` provides `_start`
//! and the few symbols libc would have (memcpy & co.), and the linker must not add crt1.o,
//! libc or libgcc. `-no-pie` because nothing would apply a position-independent
//! executable's relocations: that is the dynamic loader's (or static-pie libc's) job.

fn main() {
    for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
        println!("cargo:rustc-link-arg-bins={arg}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
