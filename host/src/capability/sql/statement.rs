//! What the host reads in a statement's text: its first word (the span's operation) and
//! whether it tries to control the transaction the host owns.

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

/// The statement's first keyword if it controls transactions (which the host owns), past
/// blanks and comments.
pub(super) fn transaction_control(statement: &str) -> Option<String> {
    let mut rest = statement.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r).trim_start();
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r).trim_start();
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    const CONTROL: &[&str] = &[
        "BEGIN",
        "START",
        "COMMIT",
        "END",
        "ROLLBACK",
        "ABORT",
        "SAVEPOINT",
        "RELEASE",
        "XA",
    ];
    CONTROL.contains(&word.as_str()).then_some(word)
}
