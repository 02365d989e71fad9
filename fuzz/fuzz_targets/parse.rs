//! Fuzzes the parser: any bytes must give a module or diagnostics, never a panic; an accepted
//! module must verify and print to text that parses to an equal module.
#![no_main]

use graphc_ir::{equiv::modules_equal, parse_module, print_module, verify_module, SourceFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_module(&text) {
        Ok(m) => {
            assert!(verify_module(&m).is_empty());
            let printed = print_module(&m);
            let again = parse_module(&printed).expect("printed text parses");
            modules_equal(&m, &again).expect("round trip");
            assert_eq!(print_module(&again), printed);
        }
        Err(diags) => {
            assert!(!diags.is_empty());
            let file = SourceFile::new("f", text.as_ref());
            for d in diags {
                let _ = d.render(&file);
            }
        }
    }
});
