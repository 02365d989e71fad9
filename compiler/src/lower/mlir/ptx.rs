//! `emit.rs`'s GPU kernels through MLIR's NVVM path to PTX: the scalar code to the LLVM and
//! NVVM dialects, then `gpu-module-to-binary` with LLVM's NVPTX back end (no CUDA needed);
//! the PTX is the `gpu.binary`'s object, read back from the printed module.

use super::jit::with_context;
use melior::ir::Module;
use melior::pass::PassManager;
use melior::utility::parse_pass_pipeline;

/// From `emit::gpu_module`'s dialects to PTX inside a `gpu.binary`.
pub const PIPELINE: &str = "builtin.module(gpu.module(canonicalize,cse,convert-scf-to-cf,convert-math-to-llvm,convert-gpu-to-nvvm,canonicalize,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})";

/// The PTX of a module `emit::gpu_module` wrote.
pub fn ptx(text: &str) -> Result<String, String> {
    with_context(|context, said| {
        let mut module = Module::parse(context, text).ok_or_else(|| said("MLIR does not parse the GPU kernels"))?;
        let pm = PassManager::new(context);
        parse_pass_pipeline(pm.as_operation_pass_manager(), PIPELINE).map_err(|e| e.to_string())?;
        pm.run(&mut module).map_err(|_| said("lowering the GPU kernels to PTX failed"))?;
        let printed = module.as_operation().to_string();
        // The object is a C string: its NUL terminator is not PTX.
        let code = assembly(&printed).ok_or_else(|| "the lowered GPU module holds no PTX".to_string())?;
        Ok(code.trim_end_matches('\0').to_string())
    })
}

/// The `assembly = "..."` string of a printed `gpu.binary`, unescaped (MLIR writes `\XX`
/// hex escapes, `\\` and `\"`).
fn assembly(printed: &str) -> Option<String> {
    let start = printed.find("assembly = \"")? + "assembly = \"".len();
    let bytes = &printed.as_bytes()[start..];
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        match *bytes.get(i)? {
            b'"' => break,
            b'\\' => {
                let next = *bytes.get(i + 1)?;
                if next == b'\\' || next == b'"' {
                    out.push(next);
                    i += 2;
                } else {
                    let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 3;
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn assembly_strings_are_unescaped() {
        let printed = r#"gpu.binary @k [#gpu.object<#nvvm.target, assembly = "a\0Ab\09\22c\\d">]"#;
        assert_eq!(super::assembly(printed).as_deref(), Some("a\nb\t\"c\\d"));
    }
}
