//! Helpers shared by the workspace-level tests: where the examples and corpora live.

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ lives in the workspace").to_path_buf()
}

/// Every `.gir` file under a directory relative to the workspace root, sorted.
pub fn gir_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gir"))
        .collect();
    files.sort();
    files
}

/// True when golden files should be rewritten rather than compared.
pub fn bless() -> bool {
    std::env::var_os("GRAPHC_BLESS").is_some()
}
