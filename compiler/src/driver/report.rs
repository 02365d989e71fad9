//! What the driver says to the user: errors already in words, and counted nouns.

/// An error already put into words for the user (diagnostics rendered against the source):
/// printed as it is, with no `error:` in front.
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.trim_end())
    }
}

impl std::error::Error for Reported {}

/// `s` after a count other than one: `1 node`, `2 nodes`.
pub fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
