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
    exit_now(0)
}

/// Ends the process with `status` at once, without exit handlers or destructors (see
/// [`exit_quietly`]): for a thread beside others that are still running.
pub fn exit_now(status: i32) -> ! {
    // SAFETY: `_exit` takes no pointers and does not return; skipping destructors and exit
    // handlers is the point.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(status)
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

/// What a command says on standard output: lines for people as it goes, or with `--json` the
/// same facts as the fields of one JSON object, printed at the end.
#[derive(Debug)]
pub struct Report {
    json: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Report {
    pub fn new(json: bool) -> Report {
        Report { json: json.then(serde_json::Map::new) }
    }

    pub fn is_json(&self) -> bool {
        self.json.is_some()
    }

    /// A fact: `key` with `value` in the JSON object, else the line `line` makes.
    pub fn add(&mut self, key: &str, value: serde_json::Value, line: impl FnOnce() -> String) {
        match &mut self.json {
            Some(map) => {
                map.insert(key.to_string(), value);
            }
            None => say!("{}", line()),
        }
    }

    /// One of a list of facts: `value` appended to the JSON array `key`, else the line.
    pub fn push(&mut self, key: &str, value: serde_json::Value, line: impl FnOnce() -> String) {
        match &mut self.json {
            Some(map) => {
                let list = map.entry(key).or_insert_with(|| serde_json::Value::Array(Vec::new()));
                if let serde_json::Value::Array(items) = list {
                    items.push(value);
                }
            }
            None => say!("{}", line()),
        }
    }

    /// A field of the JSON object only (what the lines say elsewhere, or not at all).
    pub fn set(&mut self, key: &str, value: serde_json::Value) {
        if let Some(map) = &mut self.json {
            map.insert(key.to_string(), value);
        }
    }

    /// A line only (progress, which the JSON object sums up).
    pub fn line(&self, line: impl FnOnce() -> String) {
        if self.json.is_none() {
            say!("{}", line());
        }
    }

    /// Prints the JSON object, with --json.
    pub fn finish(self) {
        if let Some(map) = self.json {
            say!("{}", serde_json::Value::Object(map));
        }
    }
}
