//! The object half of the CPU backend's compile side: kernels emitted into a relocatable
//! object (cranelift-object, position-independent) for a target triple, for `graphc compile`.
//! The code is the JIT's (the same `Emitter`); only the module and the instruction set differ.

use super::codegen::{host_isa, Emitter, Isa, Listings};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_module::default_libcall_names;
use cranelift_object::{ObjectBuilder, ObjectModule};
use std::str::FromStr;

/// The instructions an object's code may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cpu {
    /// A portable baseline: x86-64-v2 (SSE4.2, POPCNT) on x86-64, the base architecture on
    /// aarch64 (NEON).
    #[default]
    Baseline,
    /// Everything this host has (only when compiling for the host's own architecture).
    Native,
}

/// Cranelift configured for `triple` (None: the host) and `cpu`, for position-independent code.
pub fn target_isa(triple: Option<&str>, cpu: Cpu) -> Result<OwnedTargetIsa, String> {
    let host = target_lexicon::Triple::host();
    let triple = match triple {
        Some(t) => target_lexicon::Triple::from_str(t).map_err(|e| format!("--target {t}: {e}"))?,
        None => host.clone(),
    };
    // The bundle is 64-bit little-endian words and the run-time library is built for Linux.
    let supported =
        matches!(triple.architecture, target_lexicon::Architecture::X86_64 | target_lexicon::Architecture::Aarch64(_))
            && triple.operating_system == target_lexicon::OperatingSystem::Linux;
    if !supported {
        return Err(format!(
            "--target {triple}: graphc compiles for x86_64-unknown-linux-gnu and aarch64-unknown-linux-gnu"
        ));
    }
    if cpu == Cpu::Native {
        if triple != host {
            return Err(format!("--cpu native is for the host ({host}), not {triple}"));
        }
        return host_isa(Isa::Native, true);
    }
    let mut flags = settings::builder();
    for (k, v) in [("opt_level", "speed"), ("use_colocated_libcalls", "false"), ("is_pic", "true")] {
        flags.set(k, v).map_err(|e| format!("cranelift setting {k}: {e}"))?;
    }
    let mut builder = cranelift_codegen::isa::lookup(triple.clone())
        .map_err(|e| format!("--target {triple}: Cranelift cannot generate code for it ({e})"))?;
    if matches!(triple.architecture, target_lexicon::Architecture::X86_64) {
        builder.enable("x86-64-v2").map_err(|e| format!("cranelift preset x86-64-v2: {e}"))?;
    }
    builder.finish(settings::Flags::new(flags)).map_err(|e| format!("cannot configure Cranelift for {triple}: {e}"))
}

/// An emitter into a new object named `name` for `isa`; the math symbols stay undefined, for
/// the run-time library to resolve at link time.
pub fn emitter(isa: OwnedTargetIsa, name: &str) -> Result<Emitter<ObjectModule>, String> {
    let builder = ObjectBuilder::new(isa, name, default_libcall_names()).map_err(|e| e.to_string())?;
    Emitter::new(ObjectModule::new(builder), Listings::default())
}
