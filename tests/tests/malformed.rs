//! The malformed-input corpus: each `tests/malformed/NAME.gir` must be rejected with exactly the
//! diagnostics in `NAME.expected` (rewrite them with GRAPHC_BLESS=1 after reviewing the change).

use graphc_ir::diag::render_all;
use graphc_ir::{parse_file, verify_module};
use graphc_tests::{bless, gir_files, root};

#[test]
fn malformed_inputs_give_the_expected_diagnostics() {
    let files = gir_files("tests/malformed");
    assert!(files.len() >= 40, "the corpus has only {} cases", files.len());
    let mut failures = Vec::new();
    for path in files {
        // Diagnostics name the file relative to the workspace, so golden files do not depend
        // on where the checkout lives.
        let rel = path.strip_prefix(root()).unwrap();
        let (mut file, result) = parse_file(&path);
        file.name = rel.display().to_string();
        let diags = match result {
            Ok(m) => verify_module(&m),
            Err(d) => d,
        };
        let rendered = render_all(&diags, &file);
        let expected_path = path.with_extension("expected");
        if diags.is_empty() {
            failures.push(format!("{}: accepted, but it is in the malformed corpus", rel.display()));
            continue;
        }
        if bless() {
            std::fs::write(&expected_path, &rendered).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if rendered != expected {
            failures.push(format!("{}:\n--- expected\n{expected}--- got\n{rendered}", rel.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
