//! Linking an object with the run-time library: an executable with the system's C compiler
//! (`cc`; libgcc linked statically, so it needs nothing but glibc), or a static library (the
//! run-time library's archive with the object added, by `ar`).
//!
//! The run-time library is `libgraphc_aot.a`, built from crate graphc-aot (`cargo build -p
//! graphc-aot`), found beside the graphc binary, or where `GRAPHC_AOT_LIB` says. Stable cargo
//! cannot make one crate's build output another's input, hence the lookup.

use graphc_runtime::fsutil;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The run-time library's file name.
pub const RUNTIME_LIBRARY: &str = "libgraphc_aot.a";

/// The system libraries a Rust static library needs besides libc, less libgcc_s (libgcc's
/// unwinder is linked statically instead, `-static-libgcc`).
const SYSTEM_LIBS: [&str; 5] = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"];

/// Where the run-time library is: `GRAPHC_AOT_LIB`, else beside the running graphc.
pub fn runtime_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("GRAPHC_AOT_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() { Ok(p) } else { Err(format!("GRAPHC_AOT_LIB={}: no such file", p.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the graphc binary: {e}"))?;
    let dir = exe.parent().ok_or("the graphc binary has no directory")?;
    // Test binaries run from target/<profile>/deps; the library is one level up.
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let p = d.join(RUNTIME_LIBRARY);
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(format!(
        "the run-time library {RUNTIME_LIBRARY} is not beside {}: build it with `cargo build -p graphc-aot` (with the same --release as graphc), or set GRAPHC_AOT_LIB",
        exe.display()
    ))
}

/// A scratch directory for the object and the linker's output, in the system's temporary
/// directory, removed when dropped. What is linked there is then copied to the output the way
/// every file graphc writes is written (`fsutil`), never moved over whatever the path names.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        let name = format!(
            "graphc-link-{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
        );
        let dir = std::env::temp_dir().join(name);
        // Private: it holds the program's object and weights while they are linked.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&dir)
            .map_err(|e| format!("cannot create the scratch directory {}: {e}", dir.display()))?;
        Ok(Scratch(dir))
    }

    /// Copies the scratch file `from` to `out`, as an executable or not.
    fn install(&self, from: &Path, out: &Path, executable: bool) -> Result<(), String> {
        let copy = |f: &mut std::fs::File| {
            std::fs::File::open(from).and_then(|mut src| std::io::copy(&mut src, f)).map(|_| ())
        };
        let written = if executable {
            fsutil::write_executable_atomically(out, copy)
        } else {
            fsutil::write_atomically(out, copy)
        };
        written.map_err(|e| format!("cannot write {}: {e}", out.display()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.output().map_err(|e| format!("cannot run {program} to {what}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{program} failed to {what} ({}): {}", out.status, stderr.trim()));
    }
    Ok(())
}

/// The executable `out`: `object` linked with the run-time library by `cc` (or `$CC`).
pub fn executable(object: &[u8], out: &Path) -> Result<(), String> {
    let lib = runtime_library()?;
    let scratch = Scratch::new()?;
    let o = scratch.0.join("program.o");
    std::fs::write(&o, object).map_err(|e| format!("cannot write {}: {e}", o.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let tmp = scratch.0.join("program");
    run(
        Command::new(cc)
            .arg("-o")
            .arg(&tmp)
            .arg(&o)
            .arg(&lib)
            .args(["-static-libgcc", "-Wl,--gc-sections", "-Wl,--strip-debug"])
            .args(SYSTEM_LIBS),
        "link the executable",
    )?;
    scratch.install(&tmp, out, true)
}

/// The static library `out`: the run-time library's archive with `object` added (by `ar`, or
/// `$AR`). A program links it with `cc prog.c out.a -lpthread -ldl -lm`.
pub fn static_library(object: &[u8], out: &Path) -> Result<(), String> {
    let lib = runtime_library()?;
    let scratch = Scratch::new()?;
    let archive = scratch.0.join("lib.a");
    std::fs::copy(&lib, &archive).map_err(|e| format!("cannot copy {}: {e}", lib.display()))?;
    let name = format!("{}_graphc.o", out.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
    let o = scratch.0.join(&name);
    std::fs::write(&o, object).map_err(|e| format!("cannot write {}: {e}", o.display()))?;
    let ar = std::env::var("AR").unwrap_or_else(|_| "ar".into());
    let mut cmd = Command::new(ar);
    // The object format named, so that GNU ar indexes Rust's objects as ELF rather than
    // through an installed LLVM plugin, which fails on newer bitcode sections and leaves their
    // symbols out of the index.
    match std::env::consts::ARCH {
        "x86_64" => _ = cmd.arg("--target=elf64-x86-64"),
        "aarch64" => _ = cmd.arg("--target=elf64-littleaarch64"),
        _ => {}
    }
    run(cmd.arg("rs").arg(&archive).arg(&o), "add the object to the static library")?;
    scratch.install(&archive, out, false)
}
