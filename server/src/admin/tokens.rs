//! The admin API's bearer tokens (`--admin-tokens PATH`): one line per token,
//! `<name> <read|write> <token>`, `#` starting a comment. A token is kept as its
//! SHA-256 digest and a presented token is compared with every one, in constant
//! time, so neither its bytes nor its length shows in the time taken. The file
//! is read again when it changes; a file that does not parse is logged and the
//! tokens in force stay.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;

/// Fewer characters than this is not a token (a guessable one is a default
/// credential by another name).
///
/// ```
/// assert_eq!(sluicegate_server::admin::MIN_TOKEN_LEN, 16);
/// ```
pub const MIN_TOKEN_LEN: usize = 16;

/// What a token may do.
///
/// ```
/// use sluicegate_server::admin::Role;
/// assert_ne!(Role::Read, Role::Write);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// GET, validate and explain.
    Read,
    /// Also create, replace and delete.
    Write,
}

/// Who a request comes from: a token's name (what `updated_by` records) and role.
///
/// ```
/// use sluicegate_server::admin::{Principal, Role};
/// let p = Principal { name: "alice".into(), role: Role::Write };
/// assert_eq!(p.name, "alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

#[derive(Debug)]
struct Token {
    principal: Principal,
    digest: [u8; 32],
}

fn digest(token: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token);
    let mut out = [0; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Parses a token file's text; an error names the line.
fn parse(path: &Path, text: &str) -> Result<Vec<Token>, String> {
    let mut out: Vec<Token> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |m: &str| format!("{}:{}: {m}", path.display(), i + 1);
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, role, token] = fields[..] else {
            return Err(at("expected `<name> <read|write> <token>`"));
        };
        let role = match role {
            "read" => Role::Read,
            "write" => Role::Write,
            other => return Err(at(&format!("role `{other}`: expected `read` or `write`"))),
        };
        if token.chars().count() < MIN_TOKEN_LEN {
            return Err(at(&format!(
                "the token of `{name}` is shorter than {MIN_TOKEN_LEN} characters"
            )));
        }
        let digest = digest(token.as_bytes());
        if out.iter().any(|t| t.digest == digest) {
            return Err(at(&format!("the token of `{name}` is another name's too")));
        }
        out.push(Token {
            principal: Principal {
                name: name.to_owned(),
                role,
            },
            digest,
        });
    }
    if out.is_empty() {
        return Err(format!("{}: no token in the file", path.display()));
    }
    Ok(out)
}

/// The tokens in force, and the file they come from.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    tokens: ArcSwap<Vec<Token>>,
    loaded: Mutex<String>,
}

impl Tokens {
    /// Reads the token file: an error (a missing or empty file, a bad line) is
    /// why the admin listener does not start.
    ///
    /// ```
    /// use sluicegate_server::admin::{Role, Tokens};
    /// let path = std::env::temp_dir().join(format!("sg-tokens-doc-{}", std::process::id()));
    /// std::fs::write(&path, "# ops\nalice write 0123456789abcdef0123\nbob read fedcba9876543210fedc\n")?;
    /// let tokens = Tokens::load(&path)?;
    /// assert_eq!(tokens.find("fedcba9876543210fedc").unwrap().role, Role::Read);
    /// assert!(tokens.find("fedcba9876543210fedd").is_none());
    /// std::fs::write(&path, "alice write short\n")?;
    /// assert!(Tokens::load(&path).unwrap_err().contains(":1: the token of `alice` is shorter"));
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let tokens = parse(path, &text)?;
        Ok(Tokens {
            path: path.to_owned(),
            tokens: ArcSwap::from_pointee(tokens),
            loaded: Mutex::new(text),
        })
    }

    /// Reads the file again; if it changed and parses, its tokens are in force
    /// (`Ok(true)`).
    pub(crate) fn reload(&self) -> Result<bool, String> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if *loaded == text {
            return Ok(false);
        }
        let tokens = parse(&self.path, &text)?;
        self.tokens.store(Arc::new(tokens));
        *loaded = text;
        Ok(true)
    }

    /// The principal of `presented`, compared with every token in constant time.
    ///
    /// ```
    /// use sluicegate_server::admin::Tokens;
    /// let path = std::env::temp_dir().join(format!("sg-tokens-find-{}", std::process::id()));
    /// std::fs::write(&path, "ci write 0123456789abcdef0123\n")?;
    /// let tokens = Tokens::load(&path)?;
    /// assert_eq!(tokens.find("0123456789abcdef0123").unwrap().name, "ci");
    /// assert!(tokens.find("0123456789abcdef012").is_none()); // a prefix is not the token
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn find(&self, presented: &str) -> Option<Principal> {
        let d = digest(presented.as_bytes());
        let tokens = self.tokens.load();
        let mut found = None;
        for t in tokens.iter() {
            if bool::from(t.digest.ct_eq(&d)) {
                found = Some(t.principal.clone());
            }
        }
        found
    }
}
