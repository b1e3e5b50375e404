//! envoyproxy/ratelimit's YAML configuration: one file per domain, a tree of
//! descriptors, each node optionally carrying a rate limit.
//!
//! The file is read into typed structs (unknown keys are errors with their line and
//! column, as envoyproxy/ratelimit rejects unknown keys) and checked the way
//! envoyproxy/ratelimit checks it (empty key, duplicate composite key, unit, unlimited
//! with a unit, replaces). The result is a [`DescriptorTree`]: a lookup tree whose leaves
//! point at [`LimitDef`]s, resolved per request descriptor by [`DescriptorTree::resolve`]
//! with envoyproxy/ratelimit's precedence. A domain split across several files is
//! one tree ([`DescriptorTree::merge`]).

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use serde::Deserialize;
use std::collections::HashMap;

use crate::config::ConfigError;

/// One YAML file's content.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    domain: String,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    key: String,
    #[serde(default)]
    value: String,
    rate_limit: Option<YamlRateLimit>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    // Accepted by envoyproxy/ratelimit, refused here with a clear error rather than
    // silently meaning something else (README: differences).
    quota_mode: Option<serde::de::IgnoredAny>,
    share_threshold: Option<serde::de::IgnoredAny>,
    value_to_metric: Option<serde::de::IgnoredAny>,
    metadata: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unit: String,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
    /// sluicegate extension: the algorithm by its `Kind` name (default fixed_window).
    algorithm: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    #[serde(default)]
    name: String,
}

/// What a limited descriptor node does.
///
/// ```
/// use sluicegate_server::{DescriptorTree, LimitKind};
/// let d = DescriptorTree::from_yaml("u.yaml", "domain: u\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n").unwrap();
/// assert_eq!(d.limits()[0].kind, LimitKind::Unlimited);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKind {
    /// `rate_limit: {unlimited: true}`: always OK, never counted.
    Unlimited,
    /// `requests_per_unit` per `unit`.
    Rate {
        /// Requests per unit (0: every request is over the limit, as upstream).
        requests_per_unit: u32,
        /// The window, aligned to the Unix epoch like envoyproxy/ratelimit's.
        unit: Unit,
        /// The algorithm's `Kind` name when the extension field names one.
        algorithm: Option<String>,
    },
}

/// One `rate_limit` of the tree, with the flags of its descriptor node.
///
/// ```
/// let yaml = "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1, name: n}\n";
/// let d = sluicegate_server::DescriptorTree::from_yaml("d.yaml", yaml).unwrap();
/// let l = &d.limits()[0];
/// assert_eq!((l.full_key.as_str(), l.name.as_str(), l.shadow, l.depth), ("d.k", "n", true, 1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDef {
    /// The domain of the file the limit is in.
    pub domain: String,
    /// `domain.key_value.key…`, as envoyproxy/ratelimit names the limit in stats.
    pub full_key: String,
    /// `rate_limit.name` (empty if none): what `replaces` refers to.
    pub name: String,
    /// Names of the limits this one replaces when both apply to one request.
    pub replaces: Vec<String>,
    /// Counted, never denies.
    pub shadow: bool,
    /// Metrics per distinct descriptor value rather than per node.
    pub detailed_metric: bool,
    /// Entries of the descriptors this limit applies to (its depth in the tree).
    pub depth: usize,
    /// The limit itself.
    pub kind: LimitKind,
}

/// The seconds of an envoyproxy/ratelimit unit (a month is 30 days, a year 365).
///
/// ```
/// use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
/// assert_eq!(sluicegate_server::unit_seconds(Unit::Hour), Some(3600));
/// assert_eq!(sluicegate_server::unit_seconds(Unit::Unknown), None);
/// ```
pub fn unit_seconds(unit: Unit) -> Option<u64> {
    Some(match unit {
        Unit::Unknown => return None,
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 3600,
        Unit::Day => 86_400,
        Unit::Week => 7 * 86_400,
        Unit::Month => 30 * 86_400,
        Unit::Year => 365 * 86_400,
    })
}

/// A node of the descriptor tree.
#[derive(Debug, Default)]
struct Node {
    limit: Option<usize>,
    children: Level,
}

/// The children of a node, by entry key.
#[derive(Debug, Default)]
struct Level {
    by_key: HashMap<String, KeyChildren>,
}

/// The children under one entry key: exact values, then wildcard values in file
/// order, then the key-only node (any value; each value still counted apart).
#[derive(Debug, Default)]
struct KeyChildren {
    exact: HashMap<String, Node>,
    wildcards: Vec<(Vec<String>, Node)>,
    any: Option<Box<Node>>,
}

/// One domain's descriptor tree and its limits, from one file or several.
#[derive(Debug)]
pub struct DescriptorTree {
    /// The domain name requests carry.
    pub name: String,
    root: Level,
    limits: Vec<LimitDef>,
    /// The file each top-level descriptor (by its full key) came from.
    origins: HashMap<String, String>,
}

impl Level {
    /// The full key of each descriptor at this level (`domain.key_value`).
    fn full_keys<'a>(&'a self, domain: &'a str) -> impl Iterator<Item = String> + 'a {
        self.by_key.iter().flat_map(move |(key, kc)| {
            let exact = kc.exact.keys().map(move |v| format!("{domain}.{key}_{v}"));
            let wild = kc
                .wildcards
                .iter()
                .map(move |(p, _)| format!("{domain}.{key}_{}", p.join("*")));
            let any = kc.any.iter().map(move |_| format!("{domain}.{key}"));
            exact.chain(wild).chain(any)
        })
    }
}

impl KeyChildren {
    /// Adds `by` to every limit index below (the limits of a merged file follow
    /// those already there).
    fn shift(&mut self, by: usize) {
        let nodes = self
            .exact
            .values_mut()
            .chain(self.wildcards.iter_mut().map(|(_, n)| n))
            .chain(self.any.as_deref_mut());
        for node in nodes {
            node.shift(by);
        }
    }
}

impl Node {
    fn shift(&mut self, by: usize) {
        if let Some(l) = &mut self.limit {
            *l += by;
        }
        for kc in self.children.by_key.values_mut() {
            kc.shift(by);
        }
    }
}

/// `*` matches any run of characters (also none), the rest literally.
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    if parts.len() == 1 {
        return first == value;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str())
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

impl DescriptorTree {
    /// Parses one file's YAML text; `file` names it in errors.
    ///
    /// ```
    /// use sluicegate_server::DescriptorTree;
    /// let d = DescriptorTree::from_yaml("a.yaml", "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n").unwrap();
    /// assert_eq!(d.name, "edge");
    /// assert_eq!(d.resolve([("ip", "10.0.0.1")]).unwrap().full_key, "edge.ip");
    /// assert!(DescriptorTree::from_yaml("b.yaml", "domain: edge\nbogus: 1\n").unwrap_err().to_string().contains("bogus"));
    /// ```
    pub fn from_yaml(file: &str, text: &str) -> Result<DescriptorTree, ConfigError> {
        let err = |message: String| ConfigError::new(file, message);
        let root: YamlRoot = serde_yaml_ng::from_str(text).map_err(|e| err(e.to_string()))?;
        if root.domain.is_empty() {
            return Err(err("config file cannot have empty domain".into()));
        }
        let mut domain = DescriptorTree {
            name: root.domain.clone(),
            root: Level::default(),
            limits: Vec::new(),
            origins: HashMap::new(),
        };
        let mut level = Level::default();
        load_level(
            &mut level,
            &root.descriptors,
            &root.domain,
            1,
            &mut domain.limits,
        )
        .map_err(err)?;
        domain.origins = level
            .full_keys(&domain.name)
            .map(|k| (k, file.to_owned()))
            .collect();
        domain.root = level;
        for l in &mut domain.limits {
            l.domain.clone_from(&domain.name);
        }
        Ok(domain)
    }

    /// Adds the descriptors of `other`, another file of the same domain, as
    /// envoyproxy/ratelimit merges a domain split across files: its top-level
    /// descriptors join this tree's; one whose composite key is already here is an
    /// error naming both files.
    ///
    /// ```
    /// use sluicegate_server::DescriptorTree;
    /// let limit = "rate_limit: {unit: second, requests_per_unit: 1}";
    /// let mut a = DescriptorTree::from_yaml("a.yaml", &format!("domain: d\ndescriptors:\n  - key: k\n    value: a\n    {limit}\n"))?;
    /// let b = DescriptorTree::from_yaml("b.yaml", &format!("domain: d\ndescriptors:\n  - key: k\n    value: b\n    {limit}\n"))?;
    /// a.merge(b)?;
    /// assert_eq!(a.resolve([("k", "b")]).unwrap().full_key, "d.k_b");
    /// let again = DescriptorTree::from_yaml("c.yaml", &format!("domain: d\ndescriptors:\n  - key: k\n    value: a\n    {limit}\n"))?;
    /// let err = a.merge(again).unwrap_err();
    /// assert_eq!(err.to_string(), "c.yaml: duplicate descriptor composite key 'd.k_a' (also in a.yaml)");
    /// # Ok::<(), sluicegate_server::ConfigError>(())
    /// ```
    pub fn merge(&mut self, other: DescriptorTree) -> Result<(), ConfigError> {
        let shift = self.limits.len();
        let DescriptorTree {
            root,
            limits,
            origins,
            ..
        } = other;
        // Check every key before changing anything (in order: one answer).
        let mut keys: Vec<String> = root.full_keys(&self.name).collect();
        keys.sort_unstable();
        for key in keys {
            if let Some(first) = self.origins.get(&key) {
                let file = origins.get(&key).cloned().unwrap_or_default();
                let msg = format!("duplicate descriptor composite key '{key}' (also in {first})");
                return Err(ConfigError::new(file, msg));
            }
        }
        for (key, mut kc) in root.by_key {
            kc.shift(shift);
            let here = self.root.by_key.entry(key).or_default();
            here.exact.extend(kc.exact);
            here.wildcards.extend(kc.wildcards);
            if kc.any.is_some() {
                here.any = kc.any;
            }
        }
        self.limits.extend(limits);
        self.origins.extend(origins);
        Ok(())
    }

    /// The limit that applies to one request descriptor (its entries in order), as
    /// envoyproxy/ratelimit picks it: at each depth an exact `key`+`value` node, else
    /// the first wildcard value that matches, else the key-only node; the limit is
    /// the one on the node reached by the *last* entry (a limit higher up does not
    /// apply to a longer descriptor). `None`: no limit applies.
    ///
    /// ```
    /// use sluicegate_server::DescriptorTree;
    /// let yaml = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 9}\n";
    /// let d = DescriptorTree::from_yaml("x.yaml", yaml).unwrap();
    /// assert_eq!(d.resolve([("k", "v")]).unwrap().full_key, "d.k_v");
    /// assert_eq!(d.resolve([("k", "v"), ("user", "u1")]).unwrap().full_key, "d.k_v.user");
    /// assert!(d.resolve([("k", "other")]).is_none());
    /// ```
    pub fn resolve<'a, I>(&self, entries: I) -> Option<&LimitDef>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: ExactSizeIterator,
    {
        self.resolve_index(entries).and_then(|i| self.limits.get(i))
    }

    /// [`Self::resolve`] as an index into [`Self::limits`].
    ///
    /// ```
    /// let d = sluicegate_server::DescriptorTree::from_yaml("x.yaml", "domain: x\ndescriptors:\n  - key: a\n  - key: b\n    rate_limit: {unit: day, requests_per_unit: 1}\n").unwrap();
    /// assert_eq!(d.resolve_index([("b", "1")]), Some(0));
    /// assert_eq!(d.resolve_index([("a", "1")]), None); // a node without a limit
    /// ```
    pub fn resolve_index<'a, I>(&self, entries: I) -> Option<usize>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
        I::IntoIter: ExactSizeIterator,
    {
        let entries = entries.into_iter();
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        let mut found = None;
        for (i, (key, value)) in entries.enumerate() {
            let kc = level.by_key.get(key)?;
            let node = kc
                .exact
                .get(value)
                .or_else(|| {
                    kc.wildcards
                        .iter()
                        .find(|(p, _)| wildcard_match(p, value))
                        .map(|(_, n)| n)
                })
                .or(kc.any.as_deref())?;
            if i == last {
                found = node.limit;
            }
            if node.children.by_key.is_empty() {
                break;
            }
            level = &node.children;
        }
        found
    }

    /// The file a descriptor is in, by its full key (or a key below it); the
    /// first file of the domain if none holds it.
    ///
    /// ```
    /// let d = sluicegate_server::DescriptorTree::from_yaml("x.yaml", "domain: x\ndescriptors:\n  - key: a\n").unwrap();
    /// assert_eq!(d.file_of("x.a"), "x.yaml");
    /// ```
    pub fn file_of(&self, full_key: &str) -> &str {
        let mut at = full_key;
        loop {
            if let Some(file) = self.origins.get(at) {
                return file;
            }
            match at.rfind('.') {
                Some(i) if i > self.name.len() => at = &at[..i],
                _ => break,
            }
        }
        self.origins.values().min().map_or("", String::as_str)
    }

    /// Every limit of the domain, in file order.
    ///
    /// ```
    /// let d = sluicegate_server::DescriptorTree::from_yaml("x.yaml", "domain: x\n").unwrap();
    /// assert!(d.limits().is_empty());
    /// ```
    pub fn limits(&self) -> &[LimitDef] {
        &self.limits
    }
}

fn load_level(
    level: &mut Level,
    descriptors: &[YamlDescriptor],
    parent: &str,
    depth: usize,
    limits: &mut Vec<LimitDef>,
) -> Result<(), String> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err(format!("descriptor under '{parent}' has empty key"));
        }
        let composite = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let full_key = format!("{parent}.{composite}");
        for (set, field) in [
            (d.quota_mode.is_some(), "quota_mode"),
            (d.share_threshold.is_some(), "share_threshold"),
            (d.value_to_metric.is_some(), "value_to_metric"),
            (d.metadata.is_some(), "metadata"),
        ] {
            if set {
                return Err(format!(
                    "descriptor '{full_key}': '{field}' is not supported by sluicegate-server"
                ));
            }
        }
        let mut node = Node::default();
        if let Some(rl) = &d.rate_limit {
            node.limit = Some(limits.len());
            limits.push(limit_def(rl, d, &full_key, depth)?);
        }
        load_level(
            &mut node.children,
            &d.descriptors,
            &full_key,
            depth + 1,
            limits,
        )?;
        let kc = level.by_key.entry(d.key.clone()).or_default();
        let duplicate = || format!("duplicate descriptor composite key '{full_key}'");
        if d.value.is_empty() {
            if kc.any.is_some() {
                return Err(duplicate());
            }
            kc.any = Some(Box::new(node));
        } else if d.value.contains('*') {
            let parts: Vec<String> = d.value.split('*').map(str::to_owned).collect();
            if kc.wildcards.iter().any(|(p, _)| *p == parts) {
                return Err(duplicate());
            }
            kc.wildcards.push((parts, node));
        } else {
            if kc.exact.contains_key(&d.value) {
                return Err(duplicate());
            }
            kc.exact.insert(d.value.clone(), node);
        }
    }
    Ok(())
}

fn limit_def(
    rl: &YamlRateLimit,
    d: &YamlDescriptor,
    full_key: &str,
    depth: usize,
) -> Result<LimitDef, String> {
    let unit = Unit::from_str_name(&rl.unit.to_ascii_uppercase()).filter(|u| *u != Unit::Unknown);
    let kind = if rl.unlimited {
        if unit.is_some() {
            return Err(format!(
                "descriptor '{full_key}': should not specify rate limit unit when unlimited"
            ));
        }
        if rl.algorithm.is_some() {
            return Err(format!(
                "descriptor '{full_key}': an unlimited rate limit has no algorithm"
            ));
        }
        LimitKind::Unlimited
    } else {
        let Some(unit) = unit else {
            return Err(format!(
                "descriptor '{full_key}': invalid rate limit unit '{}' (second, minute, hour, day, week, month, year)",
                rl.unit
            ));
        };
        LimitKind::Rate {
            requests_per_unit: rl.requests_per_unit,
            unit,
            algorithm: rl.algorithm.clone(),
        }
    };
    let mut replaces = Vec::with_capacity(rl.replaces.len());
    for r in &rl.replaces {
        if r.name.is_empty() {
            return Err(format!(
                "descriptor '{full_key}': should not have an empty replaces entry"
            ));
        }
        if r.name == rl.name {
            return Err(format!(
                "descriptor '{full_key}': replaces should not contain name of same descriptor"
            ));
        }
        replaces.push(r.name.clone());
    }
    Ok(LimitDef {
        domain: String::new(),
        full_key: full_key.to_owned(),
        name: rl.name.clone(),
        replaces,
        shadow: d.shadow_mode,
        detailed_metric: d.detailed_metric,
        depth,
        kind,
    })
}

#[cfg(test)]
#[path = "yaml_tests.rs"]
mod tests;
