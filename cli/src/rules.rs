//! Rule files for the commands: loading a policy to replay, `lint` and `explain`.

use std::fmt::Write as _;

use serde::Serialize;
use sluicegate_policy::{Backend, Code, Diagnostic, Policy, PolicyDef, Severity};

/// Reads a rule file; the error names it.
fn read(path: &str) -> Result<String, Vec<Diagnostic>> {
    std::fs::read_to_string(path).map_err(|e| {
        vec![Diagnostic {
            severity: Severity::Error,
            code: Code::Io,
            file: path.to_owned(),
            line: 0,
            column: 0,
            rule: None,
            field: None,
            message: format!("cannot read the rule file: {e}"),
        }]
    })
}

/// The policy in `path`, built for a replay. Rules with a `redis` or `hybrid`
/// backend are replayed on local limiters of the same algorithm and limit: a
/// replay asks what the rule decides at each line's time, and the shared
/// backends decide as one local limiter would for a single process (their
/// clock is Redis's, which a replay cannot set). The second value lists such
/// rules.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("rules.toml");
/// std::fs::write(&path, "[redis]\nurl = \"redis://127.0.0.1\"\n[[rule]]\nname = \"r\"\nlimit = \"1/s\"\nbackend = \"redis\"\n")?;
/// let (policy, local) = sluicegate_cli::rules::load_for_replay(path.to_str().unwrap()).unwrap();
/// assert_eq!(local, ["r"]);
/// assert!(policy.check_n_at(&[("a", "b")], 1, 0).allowed());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn load_for_replay(path: &str) -> Result<(Policy, Vec<String>), Vec<Diagnostic>> {
    let text = read(path)?;
    let def = PolicyDef::parse(&text, Some(path)).map_err(|e| e.diagnostics().to_vec())?;
    let remote: Vec<String> = def
        .rules()
        .iter()
        .filter(|r| r.backend() != Backend::Local)
        .map(|r| r.name().to_owned())
        .collect();
    let def = if remote.is_empty() {
        def
    } else {
        let local = def
            .rules()
            .iter()
            .map(|r| r.to_builder().backend(Backend::Local));
        PolicyDef::builder()
            .source(path)
            .ipv6_prefix(def.ipv6_prefix())
            .rules(local)
            .build()
            .map_err(|e| e.diagnostics().to_vec())?
    };
    let policy = Policy::from_def(def).map_err(|e| e.diagnostics().to_vec())?;
    Ok((policy, remote))
}

/// What `lint` found.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("r.toml");
/// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n")?;
/// let lint = sluicegate_cli::rules::lint(path.to_str().unwrap());
/// assert_eq!(lint.diagnostics.len(), 1); // b is identical to a
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Lint {
    /// Errors and warnings, errors first, each in file order.
    pub diagnostics: Vec<Diagnostic>,
}

impl Lint {
    /// How many errors.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("r.toml");
    /// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n")?;
    /// let lint = sluicegate_cli::rules::lint(path.to_str().unwrap());
    /// assert_eq!(lint.errors(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn errors(&self) -> usize {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    }
    /// How many warnings.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("r.toml");
    /// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\n")?;
    /// let lint = sluicegate_cli::rules::lint(path.to_str().unwrap());
    /// assert_eq!(lint.warnings(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }
}

/// Validates the rule file at `path`: the policy's errors and warnings, each
/// with file, line and column (the policy's validator also warns of a limit over
/// half of its algorithm's bound: doubling it would be rejected).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("rules.toml");
/// std::fs::write(&path, "[[rule]]\nname = \"a\"\nlimit = \"5/fortnight\"\n")?;
/// let lint = sluicegate_cli::rules::lint(path.to_str().unwrap());
/// assert_eq!((lint.errors(), lint.diagnostics[0].line, lint.diagnostics[0].column), (1, 3, 12));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn lint(path: &str) -> Lint {
    let diagnostics = match read(path).map(|text| PolicyDef::parse(&text, Some(path))) {
        Ok(Ok(def)) => def.warnings().to_vec(),
        Ok(Err(e)) => e.diagnostics().to_vec(),
        Err(diagnostics) => diagnostics,
    };
    Lint { diagnostics }
}

/// One rule as `explain` shows it.
///
/// ```
/// let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"t\"\nkey = [\"tenant\"]\nlimit = \"9/s\"\nbackend = \"local\"\n", None).unwrap();
/// let e = &sluicegate_cli::rules::explain(&def, &[("tenant".into(), "acme".into())])[0];
/// assert_eq!((e.matches, e.key.as_str(), e.backend.as_str(), e.line), (true, "acme", "local", 2));
/// ```
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Explained {
    /// Name.
    pub name: String,
    /// Whether the request matches it.
    pub matches: bool,
    /// `enforce` or `shadow`.
    pub mode: String,
    /// Rate string.
    pub limit: String,
    /// Algorithm name.
    pub algorithm: String,
    /// Backend.
    pub backend: String,
    /// `on_error` (what a Redis-backed rule does while Redis fails).
    pub on_error: String,
    /// Key attributes.
    pub key_attributes: Vec<String>,
    /// The key this request would use (as in `replay` reports).
    pub key: String,
    /// Line of the rule in the file.
    pub line: usize,
}

/// Which rules of `def` match a request with `attrs`, and how each would limit it.
///
/// ```
/// use sluicegate_policy::PolicyDef;
/// let def = PolicyDef::parse("[[rule]]\nname = \"login\"\nmatch = { path = \"/login\" }\nkey = [\"ip\"]\nlimit = \"5/minute\"\n", None).unwrap();
/// let e = sluicegate_cli::rules::explain(&def, &[("ip".into(), "192.0.2.1".into()), ("path".into(), "/login".into())]);
/// assert!(e[0].matches);
/// assert_eq!((e[0].key.as_str(), e[0].algorithm.as_str()), ("192.0.2.1", "token_bucket"));
/// ```
pub fn explain(def: &PolicyDef, attrs: &[(String, String)]) -> Vec<Explained> {
    let mut key = String::new();
    def.rules()
        .iter()
        .map(|r| {
            r.write_key_text(attrs, def.ipv6_prefix(), &mut key);
            Explained {
                name: r.name().to_owned(),
                matches: r.matches(attrs),
                mode: r.mode().to_string(),
                limit: r.limit().to_owned(),
                algorithm: r.spec().kind().name().to_owned(),
                backend: r.backend().to_string(),
                on_error: r.on_error().to_string(),
                key_attributes: r.key().iter().map(|k| k.as_str().to_owned()).collect(),
                key: key.clone(),
                line: r.line(),
            }
        })
        .collect()
}

/// `explain`'s text output.
///
/// ```
/// use sluicegate_cli::rules::{explain, explain_text};
/// let def = sluicegate_policy::PolicyDef::parse("[[rule]]\nname = \"g\"\nlimit = \"9/s\"\n", None).unwrap();
/// assert!(explain_text(&explain(&def, &[])).contains("g: matches"));
/// ```
pub fn explain_text(rules: &[Explained]) -> String {
    let mut s = String::new();
    let n = rules.iter().filter(|r| r.matches).count();
    let _ = writeln!(s, "{n} of {} rules match", rules.len());
    for r in rules {
        if !r.matches {
            let _ = writeln!(s, "  {}: no match (line {})", r.name, r.line);
            continue;
        }
        let key = if r.key_attributes.is_empty() {
            "one limiter for every matching request".to_owned()
        } else {
            format!("key {} = {:?}", r.key_attributes.join("+"), r.key)
        };
        let _ = writeln!(
            s,
            "  {}: matches (line {})\n      {} {} ({}), {key}\n      backend {}, on_error {}",
            r.name, r.line, r.mode, r.limit, r.algorithm, r.backend, r.on_error
        );
    }
    s
}
