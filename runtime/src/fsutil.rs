//! Writing files so that a crash never leaves a half-written one, and opening input files
//! only when they are regular files of known length.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A temporary file younger than this is never taken for a dead writer's: its writer locks it
/// right after creating it, and this covers the moment in between.
const GRACE: Duration = Duration::from_secs(1);

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
    replace_file(path, false, write)
}

/// [`write_atomically`] for a program: a new file is executable (as far as the umask lets
/// it), and a file replaced keeps its mode with execute permission added where it is
/// readable.
pub fn write_executable_atomically(path: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    replace_file(path, true, write)
}

/// Checks, before any work is done, that `path` can be written as [`write_atomically`]
/// writes: its directory exists, and it is a regular file, a symlink to one, or nothing yet.
/// The error is what [`write_atomically`] would fail with.
pub fn check_writable(path: &Path) -> io::Result<()> {
    target_of(path).map(|_| ())
}

/// The final target of `path`, its directory and file name, and the file there now if any;
/// an error for a directory (or a path ending in `/`), a device, a FIFO, a socket, this
/// process's standard output or error, and for a directory that is not there.
fn target_of(path: &Path) -> io::Result<(PathBuf, PathBuf, String, Option<std::fs::Metadata>)> {
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(io::Error::new(io::ErrorKind::IsADirectory, "it names a directory; give the path of a file"));
    }
    // What the kernel resolves the path to, magic links (/dev/stdout) included.
    let existing = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(io::Error::new(io::ErrorKind::IsADirectory, "it is a directory")),
        // A device, FIFO or socket is not replaced by a file (as root, /dev/null would be).
        Ok(m) if !m.is_file() => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {}, not a regular file", path.display(), file_kind(m.file_type())),
            ))
        }
        Ok(m) => {
            // Replacing the file our output goes to would lose what was printed there.
            for (fd, stream) in [(1, "output"), (2, "error")] {
                let same = std::fs::metadata(format!("/proc/self/fd/{fd}"))
                    .is_ok_and(|s| (s.dev(), s.ino()) == (m.dev(), m.ino()));
                if same {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is this process's standard {stream}, not a file to replace", path.display()),
                    ));
                }
            }
            Some(m)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let target = final_target(path)?;
    let dir = parent_dir(&target).to_path_buf();
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?
        .to_string_lossy()
        .into_owned();
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(io::Error::new(io::ErrorKind::NotADirectory, format!("{} is not a directory", dir.display())))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("there is no directory {}", dir.display())))
        }
        Err(e) => return Err(e),
    }
    Ok((target, dir, name, existing))
}

fn replace_file(path: &Path, executable: bool, write: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (target, dir, name, existing) = target_of(path)?;
    let dir = dir.as_path();
    remove_stale_temporaries(dir, &name);
    let mode = |m: u32| if executable { m | (m & 0o444) >> 2 } else { m };
    let mut options = OpenOptions::new();
    // Never wider than the file it replaces, even before the exact mode is set below.
    options.write(true).create_new(true).mode(mode(existing.as_ref().map_or(0o666, |m| m.mode() & 0o777)));
    // A name taken already is another writer's (PIDs repeat across PID namespaces): the next.
    let (tmp, mut f) = loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{}{}-{n}", temp_prefix(&name), std::process::id()));
        match options.open(&tmp) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n % 64 != 63 => continue,
            Err(e) => return Err(e),
        }
    };
    let result = (|| {
        // Held until the file is closed (or its writer dies): a cleaner that can take it knows
        // the writer is gone, in whatever PID namespace it ran. Where the file system has no
        // locks, nothing is cleaned (a cleaner cannot take one either).
        let _ = f.try_lock();
        if let Some(m) = &existing {
            keep_owner_and_mode(&f, m, mode(m.mode() & 0o7777))?;
        }
        write(&mut f)?;
        f.sync_all()?;
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
    drop(f);
    result
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
fn keep_owner_and_mode(f: &File, old: &std::fs::Metadata, mode: u32) -> io::Result<()> {
    let new = f.metadata()?;
    if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
        let _ = std::os::unix::fs::fchown(f, Some(old.uid()), Some(old.gid()))
            .or_else(|_| std::os::unix::fs::fchown(f, None, Some(old.gid())));
    }
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Removes the temporary files for target `name` in `dir` whose writer is gone: files named
/// exactly as [`write_atomically`] names them (`.NAME.tmp-PID-N`), regular files, older than
/// [`GRACE`], that no writer holds the lock of (a writer holds it until it is done, and a
/// killed writer's lock goes with it). Anything else is left alone; failures are ignored
/// (cleaning up is a courtesy, the write does not depend on it).
pub fn remove_stale_temporaries(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = temp_prefix(name);
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let Some((pid, n)) = file.strip_prefix(&prefix).and_then(|rest| rest.split_once('-')) else { continue };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(pid) || !digits(n) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let young = meta.modified().ok().and_then(|t| t.elapsed().ok()).is_none_or(|age| age < GRACE);
        if !meta.file_type().is_file() || young {
            continue;
        }
        // Never through a link, and never waiting on a FIFO put there meanwhile.
        let opened = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path);
        let Ok(f) = opened else { continue };
        // The lock taken, the writer is gone; the file opened, locked and named by the path
        // now must be the one listed.
        let same = |m: &std::fs::Metadata| (m.dev(), m.ino()) == (meta.dev(), meta.ino());
        if f.metadata().is_ok_and(|m| same(&m))
            && f.try_lock().is_ok()
            && std::fs::symlink_metadata(&path).is_ok_and(|m| same(&m))
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Creates (or truncates) `path` for writing as it goes, a log say, under the rule every
/// writer keeps: a regular file or nothing yet, never a device, a FIFO, a socket or a
/// directory, in a directory that is there (symlinks followed).
pub fn create_regular(path: &Path) -> io::Result<File> {
    open_regular_for_writing(path, false)
}

/// [`create_regular`], or with `append` what `path` holds kept and writes going after it (the
/// log of a task that takes up where an earlier run of it stopped).
pub fn open_regular_for_writing(path: &Path, append: bool) -> io::Result<File> {
    let (target, ..) = target_of(path)?;
    let mut options = OpenOptions::new();
    if append {
        options.append(true);
    } else {
        options.write(true).truncate(true);
    }
    // A FIFO put there since the check must not block the open; what was opened is checked.
    let f = options.create(true).custom_flags(libc::O_NONBLOCK).open(&target)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {}, not a regular file", target.display(), file_kind(m.file_type())),
        ));
    }
    Ok(f)
}

/// Creates directory `path` (and its parents) for outputs; where something else is there
/// already, an error saying what it is.
pub fn create_dir(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(m) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is {}, not a directory", path.display(), file_kind(m.file_type())),
        )),
        Err(_) => std::fs::create_dir_all(path),
    }
}

/// The directory a file of `path` is in: its parent, or `.` for a bare name.
pub fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Refuses outputs that would replace one of the run's inputs or another output: each of
/// `outputs`, as `(what, path)` with `what` saying what it is (`--log`, `-o`), is compared with
/// each input and each other output by the file it is (device and inode, symlinks and `..`
/// seen through) or, not there yet, the file it would be. The error names both.
pub fn check_outputs(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> Result<(), String> {
    let read: HashMap<Identity, usize> =
        inputs.iter().enumerate().rev().filter_map(|(i, (_, p))| Some((identity(p)?, i))).collect();
    let ids: Vec<Option<Identity>> = outputs.iter().map(|(_, p)| identity(p)).collect();
    let mut written: HashMap<&Identity, usize> = HashMap::new();
    for (i, ((what, path), id)) in outputs.iter().zip(&ids).enumerate() {
        let Some(id) = id else { continue };
        if let Some((in_what, in_path)) = read.get(id).map(|&k| inputs[k]) {
            return Err(format!(
                "{what} {} is {in_what} {}, which this run reads; give {what} another path",
                path.display(),
                in_path.display()
            ));
        }
        if let Some((other, other_path)) = written.insert(id, i).map(|k| outputs[k]) {
            return Err(format!(
                "{other} {} and {what} {} are the same file; give each its own path",
                other_path.display(),
                path.display()
            ));
        }
    }
    Ok(())
}

/// What a path names for [`check_outputs`]: the file there, or where one would be created.
#[derive(PartialEq, Eq, Hash)]
enum Identity {
    File(u64, u64),
    Planned(PathBuf),
}

fn identity(path: &Path) -> Option<Identity> {
    if let Ok(m) = std::fs::metadata(path) {
        return Some(Identity::File(m.dev(), m.ino()));
    }
    let target = final_target(path).ok()?;
    let dir = parent_dir(&target);
    Some(Identity::Planned(std::fs::canonicalize(dir).ok()?.join(target.file_name()?)))
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
pub use graphc_ir::weights_file::file_kind;
