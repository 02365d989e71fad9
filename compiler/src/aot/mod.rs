//! `graphc compile` for CPUs: an optimized module into an object file holding its kernels'
//! code, a bundle (the module as IR text with its weights taken out, the weights, a manifest of
//! the kernels) and C entry points; then, with the run-time library `libgraphc_aot.a` (crate
//! graphc-aot), a standalone executable or a static library (`link.rs`). `header.rs` writes
//! the C header that describes the entry points and every buffer.
//!
//! The program re-derives its kernels' plans from the IR text at start-up and checks each
//! against the extents its code was generated for, so the object's code only ever runs on
//! the buffers its plan allows.

mod header;
mod link;

pub use link::{runtime_library, RUNTIME_LIBRARY};

use crate::lower::cpu::object::{self, Cpu};
use crate::lower::plan;
use cranelift_codegen::ir::{types, AbiParam, InstBuilder, Type, UserFuncName};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_module::{DataDescription, DataId, FuncId, Linkage, Module as _};
use cranelift_object::ObjectModule;
use graphc_aot::bundle::{plan_hash, symbols, KernelRecord, Manifest, Ret, ABI_VERSION, FINGERPRINT};
use graphc_aot::weights;
use graphc_aot::Bundle;
use graphc_ir::Module;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};

/// What `graphc compile` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// A standalone executable with `graphc run`'s interface.
    Exe,
    /// OUT.o and OUT.h.
    Obj,
    /// One `.a` of the object and the run-time library, and OUT.h.
    StaticLib,
}

/// How to compile.
#[derive(Clone, Debug)]
pub struct AotOptions {
    pub emit: Emit,
    /// The target triple; None: the host.
    pub target: Option<String>,
    pub cpu: Cpu,
    /// Write the weights to this file instead of into the object.
    pub weights_file: Option<PathBuf>,
}

/// An object ready to write, and what the header says of it.
#[derive(Debug)]
pub struct Object {
    pub bytes: Vec<u8>,
    pub header: String,
    /// The weights, when they go to a file of their own.
    pub weights: Option<Vec<u8>>,
    /// Compiled kernels (a fusion is one), and the module's nodes (those inside fusions too).
    pub compiled: (usize, usize),
}

/// Compiles `m` (optimized, verified) into an object with entry points for `graphs` (C
/// functions per graph, or the executable's `main`); `source` names it in messages.
pub fn compile(m: &Module, source: &str, graphs: &[String], options: &AotOptions) -> Result<Object, String> {
    // Cranelift reports some lowerings it lacks for a target by panicking; that is an error
    // here, never a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile_object(m, source, graphs, options)))
        .unwrap_or_else(|p| {
            let why = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Err(format!("the code generator failed: {}", why.unwrap_or_else(|| "a panic".into())))
        })
}

fn compile_object(m: &Module, source: &str, graphs: &[String], options: &AotOptions) -> Result<Object, String> {
    // The module as the program will parse it: nodes numbered in text order, which the
    // manifest and the weights' keys refer to.
    let text = graphc_ir::print_module(m);
    let mut m = graphc_ir::parse_module_in(&text, &graphc_ir::weights::dir_of(m)).map_err(|d| {
        format!("the optimized module does not re-parse: {}", d.first().map(|d| d.message.as_str()).unwrap_or(""))
    })?;
    if options.emit != Emit::Obj && options.target.is_some() {
        let host = target_lexicon::Triple::host().to_string();
        if options.target.as_deref() != Some(host.as_str()) {
            return Err(format!(
                "--emit {} is for the host ({host}) only: a program for another target needs graphc's run-time library built for it; --emit obj cross-compiles",
                if options.emit == Emit::Exe { "exe" } else { "staticlib" }
            ));
        }
    }
    for name in graphs {
        let g = m.graph(name).ok_or_else(|| format!("no graph @{name}"))?;
        if let Some(&v) = g.inputs().iter().find(|&&v| g.values[v].ty.as_tensor().is_none()) {
            return Err(format!(
                "input '{}' of @{name} is a {}: a compiled program takes tensors only",
                g.values[v].name.as_deref().unwrap_or("?"),
                g.values[v].ty
            ));
        }
    }
    let isa = object::target_isa(options.target.as_deref(), options.cpu)?;
    let mut emitter = object::emitter(isa, source)?;
    let kernels = plan::kernels(&m);
    // Each kernel with code defines the next function; the emitter keeps their extents.
    let mut coded = Vec::with_capacity(kernels.len());
    for k in &kernels {
        coded.push(k.plan.code().map(|p| emitter.define(p)).transpose()?.is_some());
    }
    let header = header::header(&m, graphs, &kernels, options.weights_file.is_some());
    let compiled = (kernels.len(), m.graphs.iter().map(|g| g.nodes.len()).sum());
    let (mut module, defined) = emitter.finish();
    let functions: Vec<FuncId> = defined.iter().map(|(id, _)| *id).collect();
    let mut extents = defined.into_iter().map(|(_, e)| e).enumerate();
    let records = kernels
        .iter()
        .zip(coded)
        .map(|(k, has_code)| KernelRecord {
            graph: k.graph.clone(),
            node: k.node.as_u32(),
            plan: plan_hash(&k.plan),
            code: if has_code { extents.next() } else { None },
        })
        .collect();

    let (blob, weight_keys) = weights::strip(&mut m)?;
    let stripped = graphc_ir::print_module(&m);
    let weights_file = match &options.weights_file {
        Some(p) => Some(std::path::absolute(p).map_err(|e| format!("--weights-file {}: {e}", p.display()))?),
        None => None,
    };
    let manifest = Manifest {
        fingerprint: FINGERPRINT.to_string(),
        source: source.to_string(),
        graphs: graphs.to_vec(),
        kernels: records,
        weights_file: weights_file.map(|p| p.display().to_string()),
        weights: weight_keys,
    };
    let manifest = serde_json::to_vec(&manifest).map_err(|e| e.to_string())?;
    let (weights, in_object) = match options.weights_file {
        Some(_) => (Some(blob), Vec::new()),
        None => (None, blob),
    };

    let mut w = Writer { module: &mut module, ctx: FunctionBuilderContext::new() };
    let bundle = w.bundle(&manifest, stripped.as_bytes(), &in_object, &functions)?;
    match options.emit {
        Emit::Exe => w.main(bundle)?,
        Emit::Obj | Emit::StaticLib => {
            for (i, g) in graphs.iter().enumerate() {
                w.entry_points(&header::c_name(g), bundle, i as u64, options.weights_file.is_some())?;
            }
        }
    }
    let bytes = module.finish().emit().map_err(|e| format!("cannot write the object: {e}"))?;
    Ok(Object { bytes, header, weights, compiled })
}

/// One of the files [`write`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Weights,
    /// The executable, object or static library.
    Main,
    Header,
}

impl Output {
    /// What it is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Output::Weights => "--weights-file",
            Output::Main => "-o",
            Output::Header => "the C header",
        }
    }
}

/// The files [`write`] writes for `out`: the weights file, then the object and its header,
/// the static library and its header, or the executable; an error for `out` naming a
/// directory (the object's name is made from it).
pub fn output_paths(out: &Path, options: &AotOptions) -> Result<Vec<(Output, PathBuf)>, String> {
    // "DIR/" names no file: with_extension would make it "DIR.o", beside DIR.
    if out.as_os_str().to_string_lossy().ends_with('/') || out.is_dir() {
        return Err(format!("-o {}: a directory; give the path of the file to write", out.display()));
    }
    let mut paths: Vec<(Output, PathBuf)> = Vec::new();
    if let Some(w) = &options.weights_file {
        paths.push((Output::Weights, w.clone()));
    }
    let main = match options.emit {
        Emit::Obj if out.extension().is_none_or(|e| e != "o") => out.with_extension("o"),
        _ => out.to_path_buf(),
    };
    let header = main.with_extension("h");
    paths.push((Output::Main, main));
    if options.emit != Emit::Exe {
        paths.push((Output::Header, header));
    }
    Ok(paths)
}

/// Writes `object` as `options.emit` says to `out` (and the header, and the weights file);
/// the paths written.
pub fn write(object: &Object, out: &Path, options: &AotOptions) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for (output, path) in output_paths(out, options)? {
        match (output, options.emit) {
            (Output::Weights, _) => match &object.weights {
                Some(bytes) => write_file(&path, bytes)?,
                None => continue,
            },
            (Output::Header, _) => write_file(&path, object.header.as_bytes())?,
            (Output::Main, Emit::Obj) => write_file(&path, &object.bytes)?,
            (Output::Main, Emit::StaticLib) => link::static_library(&object.bytes, &path)?,
            (Output::Main, Emit::Exe) => link::executable(&object.bytes, &path)?,
        }
        written.push(path);
    }
    Ok(written)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    graphc_runtime::fsutil::write_atomically(path, |f| std::io::Write::write_all(f, bytes))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Data and functions added to the object beside the kernels.
struct Writer<'m> {
    module: &'m mut ObjectModule,
    ctx: FunctionBuilderContext,
}

impl Writer<'_> {
    /// Read-only data of `bytes`, 8-aligned, local to the object.
    fn data(&mut self, name: &str, bytes: &[u8]) -> Result<DataId, String> {
        let id = self.module.declare_data(name, Linkage::Local, false, false).map_err(|e| e.to_string())?;
        let mut d = DataDescription::new();
        d.define(bytes.to_vec().into_boxed_slice());
        d.set_align(8);
        self.module.define_data(id, &d).map_err(|e| e.to_string())?;
        Ok(id)
    }

    /// The bundle ([`graphc_aot::Bundle`]'s layout) and what it points to.
    fn bundle(
        &mut self,
        manifest: &[u8],
        module: &[u8],
        weights: &[u8],
        functions: &[FuncId],
    ) -> Result<DataId, String> {
        let parts = [
            self.data("graphc_manifest", manifest)?,
            self.data("graphc_module", module)?,
            self.data("graphc_weights", weights)?,
        ];
        let table =
            self.module.declare_data("graphc_functions", Linkage::Local, false, false).map_err(|e| e.to_string())?;
        let mut d = DataDescription::new();
        // Explicit zeros, not `define_zeroinit`: zero-initialized data goes to .bss, where no
        // relocation is applied.
        d.define(vec![0u8; 8 * functions.len().max(1)].into_boxed_slice());
        d.set_align(8);
        for (i, &f) in functions.iter().enumerate() {
            let r = self.module.declare_func_in_data(f, &mut d);
            d.write_function_addr(8 * i as u32, r);
        }
        self.module.define_data(table, &d).map_err(|e| e.to_string())?;

        let id = self.module.declare_data("graphc_bundle", Linkage::Local, false, false).map_err(|e| e.to_string())?;
        let mut d = DataDescription::new();
        // The fields where `graphc_aot::Bundle` has them (every target is 64-bit and
        // little-endian: `object::target_isa` takes no other).
        let mut bytes = vec![0u8; size_of::<Bundle>()];
        let mut word = |offset: usize, v: u64| bytes[offset..offset + 8].copy_from_slice(&v.to_le_bytes());
        word(offset_of!(Bundle, abi), ABI_VERSION);
        word(offset_of!(Bundle, manifest_len), manifest.len() as u64);
        word(offset_of!(Bundle, module_len), module.len() as u64);
        word(offset_of!(Bundle, weights_len), weights.len() as u64);
        word(offset_of!(Bundle, function_count), functions.len() as u64);
        d.define(bytes.into_boxed_slice());
        d.set_align(8);
        let pointers = [offset_of!(Bundle, manifest), offset_of!(Bundle, module), offset_of!(Bundle, weights)];
        for (&part, offset) in parts.iter().zip(pointers) {
            let gv = self.module.declare_data_in_data(part, &mut d);
            d.write_data_addr(offset as u32, gv, 0);
        }
        let gv = self.module.declare_data_in_data(table, &mut d);
        d.write_data_addr(offset_of!(Bundle, functions) as u32, gv, 0);
        self.module.define_data(id, &d).map_err(|e| e.to_string())?;
        Ok(id)
    }

    /// An exported function `name(params) -> ret` whose body calls `target` with `args` and
    /// returns what it returns.
    fn forward(
        &mut self,
        name: &str,
        params: &[Type],
        ret: Option<Type>,
        target: &str,
        args: &[Arg],
    ) -> Result<(), String> {
        let ptr = self.module.target_config().pointer_type();
        let mut sig = self.module.make_signature();
        sig.params.extend(params.iter().map(|&p| AbiParam::new(p)));
        sig.returns.extend(ret.map(AbiParam::new));
        let mut callee = self.module.make_signature();
        callee.params.extend(args.iter().map(|a| {
            AbiParam::new(match *a {
                Arg::Param(i) => params[i],
                Arg::Bundle(_) | Arg::Null => ptr,
                Arg::U64(_) => types::I64,
            })
        }));
        callee.returns.extend(ret.map(AbiParam::new));
        let target = self.module.declare_function(target, Linkage::Import, &callee).map_err(|e| e.to_string())?;
        let id = self.module.declare_function(name, Linkage::Export, &sig).map_err(|e| e.to_string())?;
        let mut ctx = self.module.make_context();
        ctx.func.signature = sig;
        ctx.func.name = UserFuncName::user(0, id.as_u32());
        let callee = self.module.declare_func_in_func(target, &mut ctx.func);
        let mut b = FunctionBuilder::new(&mut ctx.func, &mut self.ctx);
        let block = b.create_block();
        b.append_block_params_for_function_params(block);
        b.switch_to_block(block);
        let mut values = Vec::new();
        for a in args {
            values.push(match *a {
                Arg::Param(i) => b.block_params(block)[i],
                Arg::Bundle(data) => {
                    let gv = self.module.declare_data_in_func(data, b.func);
                    b.ins().global_value(ptr, gv)
                }
                Arg::U64(v) => b.ins().iconst(types::I64, v as i64),
                Arg::Null => b.ins().iconst(ptr, 0),
            });
        }
        let call = b.ins().call(callee, &values);
        let results = b.inst_results(call).to_vec();
        b.ins().return_(&results);
        b.seal_all_blocks();
        b.finalize();
        self.module.define_function(id, &mut ctx).map_err(|e| format!("cranelift: {e:?}"))?;
        Ok(())
    }

    /// `int main(int argc, char **argv)`: the run-time library's command line on the bundle.
    fn main(&mut self, bundle: DataId) -> Result<(), String> {
        let ptr = self.module.target_config().pointer_type();
        let args = [Arg::Param(0), Arg::Param(1), Arg::Bundle(bundle)];
        self.forward("main", &[types::I32, ptr], Some(types::I32), symbols::MAIN, &args)
    }

    /// Graph `index`'s C entry points, `NAME_create` and the rest (the header's).
    fn entry_points(&mut self, name: &str, bundle: DataId, index: u64, weights_file: bool) -> Result<(), String> {
        let ptr = self.module.target_config().pointer_type();
        let create = [Arg::Bundle(bundle), Arg::U64(index), Arg::Null];
        self.forward(&format!("{name}_create"), &[], Some(ptr), symbols::CREATE, &create)?;
        let sharing = [Arg::Bundle(bundle), Arg::U64(index), Arg::Param(0)];
        self.forward(&format!("{name}_create_sharing"), &[ptr], Some(ptr), symbols::CREATE_SHARING, &sharing)?;
        if weights_file {
            let create = [Arg::Bundle(bundle), Arg::U64(index), Arg::Param(0)];
            self.forward(&format!("{name}_create_with_weights"), &[ptr], Some(ptr), symbols::CREATE, &create)?;
        }
        for (suffix, pointers, ret) in symbols::FORWARDED {
            let params = vec![ptr; pointers];
            let ret = match ret {
                Ret::Void => None,
                Ret::Int => Some(types::I32),
                Ret::Pointer => Some(ptr),
            };
            let args: Vec<Arg> = (0..pointers).map(Arg::Param).collect();
            self.forward(&format!("{name}_{suffix}"), &params, ret, &format!("graphc_aot_{suffix}"), &args)?;
        }
        Ok(())
    }
}

/// An argument an entry point passes to the function it forwards to.
#[derive(Clone, Copy, Debug)]
enum Arg {
    /// The entry point's own parameter.
    Param(usize),
    /// The address of the object's bundle.
    Bundle(DataId),
    U64(u64),
    Null,
}
