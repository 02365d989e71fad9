//! Writing files so that a crash never leaves a half-written one, and opening input files
//! only when they are regular files of known length.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `path` through a temporary file in the same directory: `write` fills it, it is
/// flushed to disk, then renamed over `path` (atomic on POSIX), and the directory is synced so
/// the rename itself survives a crash. If anything fails, `path` keeps its old contents and the
/// temporary file is removed.
pub fn write_atomically(path: &Path, write: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?
        .to_string_lossy();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        write(&mut f)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // Directories cannot be opened for syncing everywhere; the rename is done either way.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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

/// "a directory", "a FIFO", ... for messages.
fn file_kind(t: std::fs::FileType) -> &'static str {
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
