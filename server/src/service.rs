//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: request checks,
//! decisions through the [`RuleSet`] in force, the response and its optional
//! `RateLimit` / `RateLimit-Policy` headers.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::{Request, Response, Status};

use crate::config::ConfigError;
use crate::metrics::ServerMetrics;
use crate::overrides::Overrides;
use crate::rule_set::TableSettings;
use crate::rule_set::{Outcome, RuleSet};
use crate::store_domains::{StoreHealth, StoreState};
use crate::toml_domain::TomlDomain;

/// Descriptors one request may carry: more is refused as malformed (Envoy sends a
/// handful; a bound keeps one request's work bounded).
pub const MAX_DESCRIPTORS: usize = 64;
/// Entries one descriptor may carry.
pub const MAX_ENTRIES: usize = 64;

/// What the service needs besides the rules.
///
/// ```
/// let s = sluicegate_server::ServiceSettings { max_hits_addend: 1_000, response_headers: true };
/// assert!(s.response_headers);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ServiceSettings {
    /// The largest `hits_addend` accepted; above it the request is INVALID_ARGUMENT.
    pub max_hits_addend: u64,
    /// Add `RateLimit` and `RateLimit-Policy` to `response_headers_to_add`.
    pub response_headers: bool,
}

/// State shared by the gRPC service, the reload task and the metrics endpoint.
#[derive(Debug)]
pub struct Shared {
    rules: RwLock<Arc<RuleSet>>,
    /// Server-wide counters.
    pub metrics: ServerMetrics,
    /// Service behaviour.
    pub settings: ServiceSettings,
    /// The pool and bound every rule build and reload uses.
    pub tables: TableSettings,
    overrides: Overrides,
    /// The rule store (`--store`), if any.
    pub(crate) store: Option<Arc<StoreState>>,
    /// Held by whoever builds a new rule set from the one in force (a config
    /// reload, a store domain added), so that neither loses the other's change.
    update: Mutex<()>,
    /// Store domains not served (a config file defines them): not tried again.
    refused: Mutex<HashSet<String>>,
}

impl Shared {
    /// Shared state starting with `rules`; limit overrides keep their keys as
    /// `tables` says (the server's pool).
    pub fn new(rules: RuleSet, settings: ServiceSettings, tables: TableSettings) -> Self {
        Self {
            rules: RwLock::new(Arc::new(rules)),
            metrics: ServerMetrics::default(),
            settings,
            overrides: Overrides::new(tables.clone()),
            tables,
            store: None,
            update: Mutex::new(()),
            refused: Mutex::default(),
        }
    }

    /// With the rule store `store`.
    pub(crate) fn with_store(mut self, store: Option<Arc<StoreState>>) -> Self {
        self.store = store;
        self
    }

    /// Builds the next rule set from the one in force with `f` and puts it in
    /// force (nothing changes if `f` fails), one update at a time.
    pub(crate) fn update<E>(
        &self,
        f: impl FnOnce(&RuleSet) -> Result<RuleSet, E>,
    ) -> Result<(), E> {
        let _one = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let next = f(&self.rules())?;
        self.replace(next);
        Ok(())
    }

    /// Serves the store's domain `name`.
    pub(crate) fn add_store_domain(
        &self,
        name: &str,
        domain: Arc<TomlDomain>,
    ) -> Result<(), ConfigError> {
        self.update(|rules| rules.with_store_domain(name, domain))
    }

    /// Whether the store's domain `name` was refused (a file defines it).
    pub(crate) fn refused(&self, name: &str) -> bool {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    /// Notes that the store's domain `name` is not served.
    pub(crate) fn refuse(&self, name: &str) {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned());
    }

    /// The store's health (`None`: no store).
    pub(crate) fn store_health(&self) -> Option<StoreHealth> {
        Some(self.store.as_ref()?.health(&self.rules()))
    }

    /// The rules in force (a snapshot: a reload does not change it under a request).
    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `rules` in force.
    pub fn replace(&self, rules: RuleSet) {
        *self.rules.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(rules);
    }

    /// Every series: the server's and each limit's, in Prometheus text format.
    pub fn render_metrics(&self) -> String {
        let mut out = String::new();
        self.metrics.render(&mut out);
        if let Some(h) = self.store_health() {
            crate::metrics::render_store(
                &mut out,
                h.up,
                h.errors,
                self.rules().store_domains().count(),
            );
        }
        crate::metrics::render_rule_header(&mut out);
        let now_ns = unix_now_ns();
        let rows = self.rules().metric_rows(now_ns);
        for (rule, shadow, m, _) in &rows {
            crate::metrics::render_rule(&mut out, rule, *shadow, m);
        }
        crate::metrics::render_rule(&mut out, "(override)", false, &self.overrides.metrics);
        crate::metrics::render_table_counts(
            &mut out,
            rows.iter().map(|(rule, _, _, c)| (rule.as_str(), *c)),
        );
        out
    }
}

/// Nanoseconds since the Unix epoch: the clock every limit is decided on, so fixed
/// windows are aligned like envoyproxy/ratelimit's (0 if the clock is before 1970).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The gRPC service.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    shared: Arc<Shared>,
}

impl RateLimiter {
    /// A service deciding with `shared`'s rules.
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn invalid(&self, reason: &'static str, message: String) -> Status {
        self.shared.metrics.malformed(reason);
        Status::invalid_argument(message)
    }

    /// The hits of each descriptor: its own `hits_addend` if set, else the request's,
    /// 0 meaning 1 (as upstream).
    fn hits(&self, req: &RateLimitRequest) -> Result<Vec<u64>, Status> {
        let max = self.shared.settings.max_hits_addend;
        let request_hits = u64::from(req.hits_addend.max(1));
        if request_hits > max {
            return Err(self.invalid("hits_addend", format!("hits_addend {request_hits} is larger than this server's maximum {max} (--max-hits-addend)")));
        }
        let mut out = Vec::with_capacity(req.descriptors.len());
        for (i, d) in req.descriptors.iter().enumerate() {
            if d.entries.is_empty() {
                return Err(
                    self.invalid("empty_descriptor", format!("descriptor {i} has no entries"))
                );
            }
            let entries = d.entries.len();
            if entries > MAX_ENTRIES {
                let message =
                    format!("descriptor {i} has {entries} entries; at most {MAX_ENTRIES}");
                return Err(self.invalid("too_many_entries", message));
            }
            if let Some(e) = d.entries.iter().find(|e| e.key.is_empty()) {
                return Err(self.invalid(
                    "empty_key",
                    format!(
                        "descriptor {i} has an entry with an empty key (value {:?})",
                        e.value
                    ),
                ));
            }
            if let Some(l) = &d.limit {
                if let Err(e) = Overrides::unit(l.unit) {
                    return Err(self.invalid("limit_override", format!("descriptor {i}: {e}")));
                }
            }
            if d.is_negative_hits {
                return Err(self.invalid("negative_hits", format!("descriptor {i}: is_negative_hits (refunds) is not supported by sluicegate-server")));
            }
            let n = d.hits_addend.map_or(request_hits, |v| v.value);
            if n > max {
                return Err(self.invalid("hits_addend", format!("descriptor {i}: hits_addend {n} is larger than this server's maximum {max} (--max-hits-addend)")));
            }
            out.push(n);
        }
        Ok(out)
    }

    /// Refuses a malformed request; else the hits of each descriptor.
    fn validate(&self, req: &RateLimitRequest) -> Result<Vec<u64>, Status> {
        if req.domain.is_empty() {
            return Err(self.invalid("empty_domain", "rate limit domain must not be empty".into()));
        }
        if req.descriptors.is_empty() {
            return Err(self.invalid(
                "no_descriptors",
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        let descriptors = req.descriptors.len();
        if descriptors > MAX_DESCRIPTORS {
            let message = format!("{descriptors} descriptors; at most {MAX_DESCRIPTORS}");
            return Err(self.invalid("too_many_descriptors", message));
        }
        self.hits(req)
    }

    /// Answers a valid request with `rules`; `hits` from [`Self::validate`].
    /// Rules on Redis are awaited: a round trip parks this task, not the thread.
    async fn answer(
        &self,
        rules: &RuleSet,
        req: &RateLimitRequest,
        hits: &[u64],
    ) -> Result<RateLimitResponse, Status> {
        let now_ns = unix_now_ns();
        let entries: Vec<&[Entry]> = req
            .descriptors
            .iter()
            .map(|d| d.entries.as_slice())
            .collect();
        let headers = self.shared.settings.response_headers;
        let skip: Vec<bool> = req.descriptors.iter().map(|d| d.limit.is_some()).collect();
        let mut outcomes = rules
            .decide_except(&req.domain, &entries, hits, now_ns, headers, &skip)
            .await;
        for (i, d) in req.descriptors.iter().enumerate() {
            let (Some(l), Some(slot)) = (&d.limit, outcomes.as_mut().and_then(|o| o.get_mut(i)))
            else {
                continue;
            };
            let unit = Overrides::unit(l.unit).map_err(Status::invalid_argument)?;
            let n = hits.get(i).copied().unwrap_or(1);
            *slot = self
                .shared
                .overrides
                .decide(
                    &req.domain,
                    &d.entries,
                    (l.requests_per_unit, unit),
                    n,
                    now_ns,
                    headers,
                )
                .map_err(Status::resource_exhausted)?;
        }
        let mut resp = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        let (mut policy, mut remaining) = (Vec::new(), Vec::new());
        let Some(outcomes) = outcomes else {
            for _ in 0..entries.len() {
                self.shared.metrics.no_limit(true);
                resp.statuses.push(DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                });
            }
            return Ok(resp);
        };
        for outcome in outcomes {
            let status = match outcome {
                Outcome::NoLimit => {
                    self.shared.metrics.no_limit(false);
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        ..Default::default()
                    }
                }
                Outcome::Unlimited => DescriptorStatus {
                    code: Code::Ok as i32,
                    limit_remaining: u32::MAX,
                    ..Default::default()
                },
                Outcome::Limited(l) => {
                    let code = if l.ok { Code::Ok } else { Code::OverLimit };
                    if !l.ok {
                        resp.overall_code = Code::OverLimit as i32;
                    }
                    if let Some((p, r)) = l.headers {
                        policy.push(p);
                        remaining.push(r);
                    }
                    let reset_secs = l.reset_ns.div_ceil(1_000_000_000);
                    DescriptorStatus {
                        code: code as i32,
                        current_limit: Some(RateLimit {
                            name: l.name.into_owned(),
                            requests_per_unit: l.requests_per_unit,
                            unit: l.unit as i32,
                        }),
                        limit_remaining: u32::try_from(l.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(PbDuration {
                            seconds: i64::try_from(reset_secs).unwrap_or(i64::MAX),
                            nanos: 0,
                        }),
                        ..Default::default()
                    }
                }
            };
            resp.statuses.push(status);
        }
        if !policy.is_empty() {
            for (key, items) in [("RateLimit-Policy", policy), ("RateLimit", remaining)] {
                resp.response_headers_to_add.push(HeaderValue {
                    key: key.into(),
                    value: items.join(", "),
                    ..Default::default()
                });
            }
        }
        Ok(resp)
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = Instant::now();
        let req = request.get_ref();
        let rules = self.shared.rules();
        let answer = match self.validate(req) {
            Ok(hits) => self.answer(&rules, req, &hits).await,
            Err(status) => Err(status),
        };
        self.shared.metrics.observe_latency(start.elapsed());
        if let Err(status) = &answer {
            tracing::debug!(domain = %request.get_ref().domain, error = %status.message(), "refused a malformed request");
        }
        answer.map(Response::new)
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
