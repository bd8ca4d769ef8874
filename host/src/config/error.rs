//! Config problems and warnings, rendered as `file:line:column: message` plus the source line and
//! a caret, the way compilers do.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A place in worker.toml, 1-based, with the text of its line for the snippet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub line: usize,
    pub column: usize,
    /// The whole source line the location is on (without its newline).
    pub source_line: String,
    /// How many characters of `source_line` the caret underlines (at least 1).
    pub width: usize,
}

impl Location {
    /// Converts a byte span of `text` into line, column and snippet.
    pub fn from_span(text: &str, span: Range<usize>) -> Location {
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let source_line = text[line_start..line_end]
            .trim_end_matches('\r')
            .to_string();
        let column = text[line_start..start].chars().count() + 1;
        let end = floor_char_boundary(text, span.end.clamp(start, line_end.max(start)));
        let width = text[start..end].chars().count().max(1);
        Location {
            line: text[..start].matches('\n').count() + 1,
            column,
            source_line,
            width,
        }
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One thing wrong with the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// None for problems that have no place in the file (a missing key, an environment variable).
    pub location: Option<Location>,
    pub message: String,
}

/// Why a config was refused. Display lists every problem, one per line, each with its snippet.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The reason is in the message and not a `source`, so `{:#}` does not print it twice.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}", render_problems(path, problems))]
    Invalid {
        path: PathBuf,
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems found (empty for a read error).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems, .. } => problems,
        }
    }
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    let mut out = String::new();
    for (i, problem) in problems.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&render_one(
            path,
            problem.location.as_ref(),
            "",
            &problem.message,
        ));
        if let Some(loc) = &problem.location {
            out.push_str(&snippet(loc));
        }
    }
    out
}

fn render_one(path: &Path, loc: Option<&Location>, kind: &str, message: &str) -> String {
    match loc {
        Some(loc) => format!(
            "{}:{}:{}: {kind}{message}",
            path.display(),
            loc.line,
            loc.column
        ),
        None => format!("{}: {kind}{message}", path.display()),
    }
}

/// ```text
///    |
/// 12 | prefetch = 0
///    |            ^
/// ```
fn snippet(loc: &Location) -> String {
    let number = loc.line.to_string();
    let pad = " ".repeat(number.len());
    // Tabs keep their width so the caret lines up under them.
    let lead: String = loc
        .source_line
        .chars()
        .take(loc.column - 1)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!(
        "\n{pad} |\n{number} | {}\n{pad} | {lead}{}",
        loc.source_line,
        "^".repeat(loc.width)
    )
}

/// Something worth fixing that does not stop the host. Display: `worker.toml:20:1: warning: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: PathBuf,
    pub location: Option<Location>,
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render_one(
            &self.path,
            self.location.as_ref(),
            "warning: ",
            &self.message,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_of_a_span() {
        let text = "a = 1\nprefetch = 0\n";
        let loc = Location::from_span(text, 17..18);
        assert_eq!((loc.line, loc.column, loc.width), (2, 12, 1));
        assert_eq!(loc.source_line, "prefetch = 0");
        let shown = snippet(&loc);
        assert!(
            shown.contains("2 | prefetch = 0\n  |            ^"),
            "{shown}"
        );
    }

    #[test]
    fn location_at_end_of_text() {
        let loc = Location::from_span("a = [", 5..5);
        assert_eq!((loc.line, loc.column), (1, 6));
    }
}
