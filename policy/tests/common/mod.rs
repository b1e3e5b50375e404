//! What the policy tests share.

use sluicegate_policy::Policy;

/// The policy of a rule file the test knows to be valid; a diagnostic fails the
/// test with its message.
pub fn valid_policy(toml: &str) -> Policy {
    Policy::from_toml(toml).unwrap_or_else(|e| panic!("{e}"))
}
