//! Tells the library where cargo builds it: the profile's directory of the target directory
//! (`OUT_DIR` is `<target>/<profile>/build/graphc-<hash>/out`). `graphc compile` looks for the
//! run-time library there, where cargo builds it as graphc's dependency, whatever binary the
//! library is linked into (graphc, a test, the Python extension).

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Some(profile_dir) = out.ancestors().nth(3) {
        println!("cargo:rustc-env=GRAPHC_PROFILE_DIR={}", profile_dir.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
}
