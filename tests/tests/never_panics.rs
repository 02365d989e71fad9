//! The parser never panics, whatever it is given: random bytes, random token soup, and the
//! examples truncated, spliced or with bytes flipped (proptest). Every rejection carries at
//! least one diagnostic, and everything accepted prints back to text that parses.

use graphc_ir::{parse_module, print_module, verify_module, SourceFile};
use graphc_tests::gir_files;
use proptest::prelude::*;

fn examples() -> Vec<String> {
    gir_files("ir-spec/examples").iter().map(|p| std::fs::read_to_string(p).unwrap()).collect()
}

fn check(text: &str) -> Result<(), TestCaseError> {
    match parse_module(text) {
        Ok(m) => {
            prop_assert!(verify_module(&m).is_empty(), "parser accepted what the verifier rejects:\n{text}");
            let printed = print_module(&m);
            prop_assert!(parse_module(&printed).is_ok(), "accepted text prints to unparseable text:\n{text}");
        }
        Err(diags) => {
            prop_assert!(!diags.is_empty());
            let file = SourceFile::new("x.gir", text);
            for d in &diags {
                let r = d.render(&file);
                prop_assert!(r.starts_with("x.gir:"), "{r}");
            }
        }
    }
    Ok(())
}

const SOUP: &[&str] = &[
    "graph",
    "@g",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    "<",
    ">",
    ",",
    ":",
    "=",
    "->",
    "%x",
    "%0",
    "f32",
    "i64[2]",
    "return",
    "yield",
    "add",
    "cond",
    "while",
    "fusion",
    "then",
    "else",
    "kernel",
    "body",
    "dense",
    "after",
    "device",
    "\"/cpu:0\"",
    "1",
    "-1",
    "2.5",
    "nan",
    "0x7FC00001",
    "0x7E01",
    "0x",
    "-",
    "\n",
    "  ",
    "//c\n",
    "var",
    "queue",
    "token",
    "\"",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn token_soup(idx in prop::collection::vec(0..SOUP.len(), 0..120)) {
        let text: String = idx.iter().map(|&i| SOUP[i]).collect::<Vec<_>>().join(" ");
        check(&text)?;
    }

    #[test]
    fn mutated_examples(which in any::<prop::sample::Index>(), cut in any::<prop::sample::Index>(), len in 0usize..40, flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        let exs = examples();
        let text = exs[which.index(exs.len())].clone();
        let mut bytes = text.into_bytes();
        // Remove a stretch, then flip some bytes.
        let at = cut.index(bytes.len() + 1);
        let end = (at + len).min(bytes.len());
        bytes.drain(at..end);
        for (i, b) in flips {
            if !bytes.is_empty() {
                let k = i.index(bytes.len());
                bytes[k] = b;
            }
        }
        check(&String::from_utf8_lossy(&bytes))?;
    }
}
