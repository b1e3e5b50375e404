//! Validation findings: errors and warnings that name the file, line, column and rule.

use std::fmt;

/// How serious a [`Diagnostic`] is.
///
/// ```
/// use sluicegate_policy::Severity;
/// assert_eq!(Severity::Error.to_string(), "error");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The file is rejected.
    Error,
    /// The file is accepted, but a rule probably does not do what was meant.
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// What a [`Diagnostic`] is about, for tools that act on it (`sluicegate lint`).
///
/// ```
/// use sluicegate_policy::{Code, PolicyDef};
/// let err = PolicyDef::parse("[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n", None).unwrap_err();
/// assert_eq!(err.diagnostics()[0].code, Code::BadRate);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// Not TOML, a missing field, a value of the wrong type, an unknown field.
    Syntax,
    /// An attribute name that is not `ip`, `path`, `method`, `host`,
    /// `header:<lower-case name>` or a lower-case application name.
    BadAttribute,
    /// An algorithm that is not a [`sluicegate::Kind`] name.
    UnknownAlgorithm,
    /// A rate string that does not parse.
    BadRate,
    /// An `ip` value that is not an address or CIDR block.
    BadCidr,
    /// Two rules with one name.
    DuplicateName,
    /// A `redis` or `hybrid` rule, but no `[redis]` table (or a bad one).
    Redis,
    /// A limit over the algorithm's bound, or a feature the algorithm lacks.
    Limit,
    /// A value out of its range (`backend`, `mode`, `on_error`, `capacity`, ...).
    BadValue,
    /// Warning: the rule can never match.
    NeverMatches,
    /// Warning: an earlier rule is identical, so this one only doubles it.
    Shadowed,
    /// The rule file could not be read.
    Io,
    /// Building the limiters failed (memory, or no Redis factory for the rule).
    Build,
}

/// One finding, located in the rule file.
///
/// ```
/// use sluicegate_policy::{Code, PolicyDef};
/// let text = "[[rule]]\nname = \"a\"\nlimit = \"5/minute\"\nalgorithm = \"gcra\"\n";
/// let err = PolicyDef::parse(text, None).unwrap_err();
/// let d = &err.diagnostics()[0];
/// assert_eq!((d.line, d.column, d.code), (4, 13, Code::UnknownAlgorithm));
/// assert_eq!(d.rule.as_deref(), Some("a"));
/// assert!(d.to_string().starts_with("<policy>:4:13: error: rule `a`: unknown algorithm"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// What it is about.
    pub code: Code,
    /// The file (`<policy>` for text without one; empty for a policy built from
    /// values that was given no source name).
    pub file: String,
    /// 1-based line; 0 for a policy built from values (see `field`).
    pub line: usize,
    /// 1-based column, in characters; 0 with line 0.
    pub column: usize,
    /// The rule's name, when the finding is inside a rule that has one.
    pub rule: Option<String>,
    /// The field the finding is about, as the rule file names it (`limit`,
    /// `match.path`, `defaults.capacity`, `redis.url`), when it is about one.
    pub field: Option<String>,
    /// What is wrong, and what would be right.
    pub message: String,
}

/// `file:line:column: error: rule `a`: …` for rule-file text; for a policy built
/// from values (line 0), the rule and field instead of the line:
/// `error: rule `a`, field `limit`: …` (after `file: ` when it has a source name).
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        } else if !self.file.is_empty() {
            write!(f, "{}: ", self.file)?;
        }
        write!(f, "{}: ", self.severity)?;
        match (&self.rule, &self.field) {
            (Some(r), Some(field)) if self.line == 0 => write!(f, "rule `{r}`, field `{field}`: ")?,
            (Some(r), _) => write!(f, "rule `{r}`: ")?,
            (None, Some(field)) if self.line == 0 => write!(f, "field `{field}`: ")?,
            (None, _) => {}
        }
        f.write_str(&self.message)
    }
}

/// A rejected policy: every error found (and the warnings), in file order.
///
/// ```
/// use sluicegate_policy::PolicyDef;
/// let err = PolicyDef::parse("[[rule]]\nname = \"a\"\nlimit = \"0/s\"\n", None).unwrap_err();
/// assert_eq!(err.diagnostics().len(), 1);
/// assert!(err.to_string().contains("<policy>:3:10"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl Error {
    /// The findings: at least one error, then any warnings.
    ///
    /// ```
    /// # use sluicegate_policy::{PolicyDef, Severity};
    /// let err = PolicyDef::parse("nonsense", None).unwrap_err();
    /// assert_eq!(err.diagnostics()[0].severity, Severity::Error);
    /// ```
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    pub(crate) fn one(d: Diagnostic) -> Error {
        Error {
            diagnostics: vec![d],
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .enumerate()
        {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Byte offsets to 1-based line and character column.
pub(crate) struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { text, starts }
    }

    pub(crate) fn locate(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts[line - 1];
        let col = self
            .text
            .get(start..offset)
            .map_or(offset - start, |s| s.chars().count());
        (line, col + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate() {
        let l = Lines::new("ab\ncd\n\né");
        assert_eq!(l.locate(0), (1, 1));
        assert_eq!(l.locate(1), (1, 2));
        assert_eq!(l.locate(3), (2, 1));
        assert_eq!(l.locate(6), (3, 1));
        assert_eq!(l.locate(7), (4, 1));
        assert_eq!(l.locate(100), (4, 2));
    }
}
