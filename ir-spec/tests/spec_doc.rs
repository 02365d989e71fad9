//! SPEC.md's op reference is the op table's: regenerate it with GRAPHC_BLESS=1.

use graphc_ir::spec_doc::{op_reference, BEGIN};

#[test]
fn spec_op_reference_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/SPEC.md");
    let text = std::fs::read_to_string(path).unwrap();
    let head = &text[..text.find(BEGIN).unwrap_or(text.len())];
    let want = format!("{head}{}", op_reference());
    if std::env::var_os("GRAPHC_BLESS").is_some() {
        std::fs::write(path, &want).unwrap();
    } else {
        assert!(
            text == want,
            "SPEC.md's op reference is stale: run GRAPHC_BLESS=1 cargo test -p graphc-ir --test spec_doc"
        );
    }
}
