//! Linking an object with the run-time library: an executable with the system's C compiler
//! (`cc`; libgcc linked statically, so it needs nothing but glibc), or a static library (the
//! run-time library's archive with the object added, by `ar`).
//!
//! The run-time library is `libgraphc_aot.a`, built from crate graphc-aot. Stable cargo
//! cannot make one crate's build output another's input, so it is looked up: where
//! `GRAPHC_AOT_LIB` says, else beside the graphc binary (`cargo build -p graphc-aot` puts it
//! there), else in the target directory this library was built in, where cargo builds it as
//! graphc's dependency (`deps/libgraphc_aot-HASH.a`) with every build of graphc. A library
//! from other sources than this graphc's (its fingerprint, `graphc_aot::bundle::FINGERPRINT`,
//! differs) is passed over: programs linked against it would refuse to start. So is every
//! directory another user could write to.

use graphc_aot::bundle::FINGERPRINT;
use graphc_runtime::fsutil;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The run-time library's file name.
pub const RUNTIME_LIBRARY: &str = "libgraphc_aot.a";

/// The system libraries a Rust static library needs besides libc, less libgcc_s (libgcc's
/// unwinder is linked statically instead, `-static-libgcc`).
const SYSTEM_LIBS: [&str; 5] = ["-lpthread", "-ldl", "-lm", "-lrt", "-lutil"];

/// Where the run-time library of this graphc is (see the module's comment).
pub fn runtime_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("GRAPHC_AOT_LIB") {
        let p = PathBuf::from(p);
        if !p.is_file() {
            return Err(format!("GRAPHC_AOT_LIB={}: no such file", p.display()));
        }
        return match has_fingerprint(&p) {
            Ok(true) => Ok(p),
            Ok(false) => Err(format!("GRAPHC_AOT_LIB={}: {}", p.display(), other_build())),
            Err(e) => Err(format!("GRAPHC_AOT_LIB={}: cannot read it: {e}", p.display())),
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the graphc binary: {e}"))?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(dir) = exe.parent() {
        // Test binaries run from target/<profile>/deps; the library is one level up.
        dirs.extend([dir.to_path_buf(), dir.parent().unwrap_or(dir).to_path_buf()]);
    }
    dirs.extend(option_env!("GRAPHC_PROFILE_DIR").map(PathBuf::from));
    // What is linked into every program must come from a directory nobody else could have
    // put it in (the build directory may be a temporary one, long gone, under /tmp).
    dirs.retain(|d| trusted(d));
    let mut stale = None;
    for d in &dirs {
        let p = d.join(RUNTIME_LIBRARY);
        if p.is_file() {
            if has_fingerprint(&p).unwrap_or(false) {
                return Ok(p);
            }
            stale.get_or_insert(p);
        }
    }
    for d in &dirs {
        if let Some(p) = built_as_dependency(&d.join("deps")) {
            return Ok(p);
        }
    }
    Err(match stale {
        Some(p) => format!(
            "the run-time library {} is {}: rebuild it with `cargo build -p graphc-aot` (with the same --release as graphc), or set GRAPHC_AOT_LIB",
            p.display(),
            other_build()
        ),
        None => format!(
            "the run-time library {RUNTIME_LIBRARY} is not beside {}: build it with `cargo build -p graphc-aot` (with the same --release as graphc), or set GRAPHC_AOT_LIB",
            exe.display()
        ),
    })
}

/// Whether `dir` is a directory of this user's (or root's) that no one else may write to.
fn trusted(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    #[allow(unsafe_code)]
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && (m.uid() == me || m.uid() == 0) && m.mode() & 0o022 == 0)
}

fn other_build() -> String {
    format!("from another build of graphc than this one ({FINGERPRINT})")
}

/// The newest `libgraphc_aot-*.a` in cargo's `deps` directory `dir` that is this graphc's.
fn built_as_dependency(dir: &Path) -> Option<PathBuf> {
    if !trusted(dir) {
        return None;
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libgraphc_aot-") && name.ends_with(".a")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    found.sort();
    found.into_iter().rev().map(|(_, p)| p).find(|p| has_fingerprint(p).unwrap_or(false))
}

/// Whether the archive at `path` holds this graphc's fingerprint (a string of its read-only
/// data), read in chunks that overlap by the fingerprint's length.
fn has_fingerprint(path: &Path) -> std::io::Result<bool> {
    let needle = FINGERPRINT.as_bytes();
    let finder = memchr::memmem::Finder::new(needle);
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 22];
    let mut kept = 0;
    loop {
        let n = f.read(&mut buf[kept..])?;
        if n == 0 {
            return Ok(false);
        }
        let len = kept + n;
        if finder.find(&buf[..len]).is_some() {
            return Ok(true);
        }
        kept = (needle.len() - 1).min(len);
        buf.copy_within(len - kept..len, 0);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("graphc-link-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// An archive-like file holding `fingerprint` at `at`, modified `age` seconds ago.
    fn library(path: &Path, at: usize, fingerprint: Option<&str>, age: u64) {
        let mut bytes = vec![0u8; at];
        bytes.extend(fingerprint.unwrap_or("").as_bytes());
        bytes.extend([0u8; 64]);
        std::fs::write(path, &bytes).unwrap();
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age)).unwrap();
    }

    #[test]
    fn the_fingerprint_is_found_across_the_read_chunks() {
        let d = scratch("chunks");
        // Straddling the first 4 MiB chunk's end, and wholly inside the second.
        for at in [(1 << 22) - 5, (1 << 22) + 3, 0] {
            library(&d.join("lib.a"), at, Some(FINGERPRINT), 0);
            assert!(has_fingerprint(&d.join("lib.a")).unwrap(), "at {at}");
        }
        library(&d.join("lib.a"), 1 << 22, Some("0.1.0-0000000000000000"), 0);
        assert!(!has_fingerprint(&d.join("lib.a")).unwrap());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_newest_library_of_this_build_is_chosen_from_cargos_deps() {
        let d = scratch("deps");
        library(&d.join("libgraphc_aot-0001.a"), 100, Some(FINGERPRINT), 300);
        // Newer, but of other sources.
        library(&d.join("libgraphc_aot-0002.a"), 100, Some("0.1.0-ffffffffffffffff"), 10);
        // Not a library of graphc-aot's name.
        library(&d.join("libother-0003.a"), 100, Some(FINGERPRINT), 0);
        assert_eq!(built_as_dependency(&d), Some(d.join("libgraphc_aot-0001.a")));
        library(&d.join("libgraphc_aot-0004.a"), 7, Some(FINGERPRINT), 100);
        assert_eq!(built_as_dependency(&d), Some(d.join("libgraphc_aot-0004.a")));
        // A directory others may write to is not searched.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(built_as_dependency(&d), None);
        let _ = std::fs::remove_dir_all(&d);
    }
}
