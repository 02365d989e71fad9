//! The scalar functions generated kernels call, lane by lane, for the ops without an inline
//! version: the very functions the reference kernels use (Rust's f32 methods, libm's erf), so
//! compiled results equal the interpreter's. (exp, tanh and sigmoid are inline: codegen.rs.)

pub extern "C" fn logf(x: f32) -> f32 {
    x.ln()
}

pub extern "C" fn erff(x: f32) -> f32 {
    libm::erff(x)
}

pub extern "C" fn powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}
