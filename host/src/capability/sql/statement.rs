//! What the host reads in a statement's text for its span: the first word.

/// The statement's first word, upper-cased (`SELECT`, `INSERT`, ...): the span's operation.
pub(super) fn operation(statement: &str) -> String {
    let word: String = statement
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .take(16)
        .collect();
    word.to_ascii_uppercase()
}
