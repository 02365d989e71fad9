//! Writing files so that a crash never leaves a half-written one, and opening input files
//! only when they are regular files of known length.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Temporary files of other processes younger than this are left alone even when their
/// writer looks dead: a writer in another PID namespace (a container sharing the directory)
/// is invisible in /proc but still writing.
const STALE_AFTER: Duration = Duration::from_secs(60);

/// The names of this process's temporary files being written now (unique, by the counter), so
/// that cleaning up never removes a concurrent writer's file.
static IN_FLIGHT: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Writes `path` through a temporary file: `write` fills it, it is flushed to disk, then
/// renamed over the file (atomic on POSIX), and the directory is synced so the rename itself
/// survives a crash. If anything fails, the file keeps its old contents and the temporary file
/// is removed.
///
/// A symlink is written through, not replaced: the temporary file goes beside the link's final
/// target and is renamed over it. A file replaced keeps its permission bits and, where the
/// process may set them, its owner and group. Temporary files for the same target that a
/// killed writer left behind are removed first (see [`remove_stale_temporaries`]).
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let target = final_target(path)?;
    let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?
        .to_string_lossy()
        .into_owned();
    let existing = match std::fs::metadata(&target) {
        Ok(m) if m.is_dir() => return Err(io::Error::new(io::ErrorKind::IsADirectory, "it is a directory")),
        // A device, FIFO or socket is not replaced by a file (as root, /dev/null would be).
        Ok(m) if !m.is_file() => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {}, not a regular file", target.display(), file_kind(m.file_type())),
            ))
        }
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    remove_stale_temporaries(dir, &name);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp_name = format!("{}{}-{n}", temp_prefix(&name), std::process::id());
    let tmp = dir.join(&tmp_name);
    in_flight(|s| s.insert(tmp_name.clone()));
    let result = (|| {
        let mut options = OpenOptions::new();
        // Never wider than the file it replaces, even before the exact mode is set below.
        options.write(true).create_new(true).mode(existing.as_ref().map_or(0o666, |m| m.mode() & 0o777));
        let mut f = options.open(&tmp)?;
        if let Some(m) = &existing {
            keep_owner_and_mode(&f, m)?;
        }
        write(&mut f)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target)?;
        // Directories cannot be opened for syncing everywhere; the rename is done either way.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    in_flight(|s| s.remove(&tmp_name));
    result
}

fn in_flight<R>(f: impl FnOnce(&mut HashSet<String>) -> R) -> R {
    f(crate::wait::lock(&IN_FLIGHT).get_or_insert_with(HashSet::new))
}

/// `.NAME.tmp-`: what every temporary file for target NAME starts with, the writer's process
/// id and a counter following.
fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// The file a path finally names: symlinks followed (relative ones from their own directory),
/// the last component's too, up to a dangling link's target, which the write then creates.
fn final_target(path: &Path) -> io::Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, "too many levels of symbolic links"))
}

/// Gives the new file the replaced one's permission bits, and its owner and group where they
/// differ from ours and the process may change them (only root may give a file away; a
/// group it belongs to, any owner).
fn keep_owner_and_mode(f: &File, old: &std::fs::Metadata) -> io::Result<()> {
    let new = f.metadata()?;
    if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
        let _ = std::os::unix::fs::fchown(f, Some(old.uid()), Some(old.gid()))
            .or_else(|_| std::os::unix::fs::fchown(f, None, Some(old.gid())));
    }
    f.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o7777))
}

/// Removes the temporary files for target `name` in `dir` whose writer is gone: files named
/// exactly as [`write_atomically`] names them (`.NAME.tmp-PID-N`), regular files, and either
/// this process's but not being written now (left by an earlier process with our id), or of a
/// process that no longer runs and untouched for [`STALE_AFTER`]. Anything else is left alone;
/// failures are ignored (cleaning up is a courtesy, the write does not depend on it).
pub fn remove_stale_temporaries(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = temp_prefix(name);
    let me = std::process::id();
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some((pid, n)) = file.strip_prefix(&prefix).and_then(|rest| rest.split_once('-')) else { continue };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(pid) || !digits(n) {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.file_type().is_file() {
            continue;
        }
        // Old enough in every case: a writer of another PID namespace may carry our PID.
        let old = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age >= STALE_AFTER);
        let stale = old && if pid == me { !in_flight(|s| s.contains(file)) } else { process_is_gone(pid) };
        if stale {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Whether no process `pid` runs, by /proc; where there is no /proc, every process might.
fn process_is_gone(pid: u32) -> bool {
    Path::new("/proc/self").exists() && !Path::new("/proc").join(pid.to_string()).exists()
}

/// Opens `path` for reading if it is a regular file (symlinks followed), with its length.
/// Devices, FIFOs and directories are refused up front: `/dev/zero` never ends, a FIFO blocks
/// the open until a writer comes, and neither has a length to check a header against. The
/// error is one line: the file, that `expected` was wanted, and what it is instead.
pub fn open_regular(path: &Path, expected: &str) -> Result<(File, u64), String> {
    let refuse = |t: std::fs::FileType| {
        format!("{} is {}, not a regular file; expected {expected}", path.display(), file_kind(t))
    };
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(refuse(meta.file_type()));
    }
    let f = File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    // Checked again on what was opened, in case the path changed in between.
    let meta = f.metadata().map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(refuse(meta.file_type()));
    }
    Ok((f, meta.len()))
}

/// Reads the whole of a regular file (see [`open_regular`]): its length at open bounds the
/// read (a file that grows meanwhile is cut, and then fails to decode), and the room for it is
/// reserved fallibly, so a huge file is an error and not an abort.
pub fn read_regular(path: &Path, expected: &str) -> Result<Vec<u8>, String> {
    let (f, len) = open_regular(path, expected)?;
    let len =
        usize::try_from(len).map_err(|_| format!("{} is too large to read; expected {expected}", path.display()))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(len)
        .map_err(|_| format!("cannot allocate {len} bytes to read {}; expected {expected}", path.display()))?;
    io::Read::read_to_end(&mut io::Read::take(f, len as u64), &mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(bytes)
}

/// "a directory", "a FIFO", ... for messages.
pub fn file_kind(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "something other than a file"
    }
}
