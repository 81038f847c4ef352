//! Counts of things in words (see specs/counts.md).

/// `count(3, "file")` is `"3 files"`: the number, a space and the noun, plural unless `n` is 1.
pub fn count(n: u64, noun: &str) -> String {
    let mut digits = itoa::Buffer::new();
    let number = digits.format(n);
    let plural = if n == 1 { "" } else { "s" };
    format!("{number} {noun}{plural}")
}
