//! The scalar functions generated kernels call, lane by lane, for the ops without an inline
//! version: the very functions the reference kernels use (Rust's f32 methods, the runtime's
//! pow), so compiled results equal the interpreter's. (exp, tanh, sigmoid and erf are inline
//! in the code.)
//!
//! Exported under these C symbols, which the JIT resolves to these functions and an object
//! file imports from this crate's static library.

/// Every function kernels may call: (symbol, arity, address).
pub fn symbols() -> [(&'static str, usize, *const u8); 2] {
    [("graphc_logf", 1, graphc_logf as *const u8), ("graphc_powf", 2, graphc_powf as *const u8)]
}

// `no_mangle` is what lets an AOT object find these by name; the names are graphc's own, so
// they cannot clash with another definition of the same symbol.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn graphc_logf(x: f32) -> f32 {
    x.ln()
}

#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn graphc_powf(x: f32, y: f32) -> f32 {
    graphc_runtime::kernels::elem::powf(x, y)
}
