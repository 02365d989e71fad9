//! Writing to the terminal and to files.

/// `println!` that ends the process quietly once stdout is closed (`graphc run ... | head`)
/// instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                $crate::cli::output::exit_quietly();
            }
        }
    }};
}

use std::io::Write;
use std::path::Path;

/// Ends the process with status 0 at once, without exit handlers: `exit` would run static
/// destructors (LLVM's among them) while a background tier may still be compiling with them,
/// which crashed `graphc run ... | head` now and then. Nothing is lost: files are written
/// atomically and closed, stderr is unbuffered, and stdout is gone.
pub fn exit_quietly() -> ! {
    // SAFETY: `_exit` takes no pointers and does not return; skipping destructors and exit
    // handlers is the point.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    }
}

/// Writes text to a file atomically, or to stdout for none or '-'.
pub fn write_output(out: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match out.filter(|p| p.as_os_str() != "-") {
        Some(out) => write_file(out, text),
        None => {
            say!("{}", text.trim_end_matches('\n'));
            Ok(())
        }
    }
}

/// Writes text to a file atomically.
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    graphc_runtime::fsutil::write_atomically(path, |f| f.write_all(text.as_bytes()))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
