//! How many step-up authorizations (403 `insufficient_scope`) were made per requested scope
//! set, so that a server asking again for scopes just granted is not obeyed for ever.

use std::collections::VecDeque;

/// Scope sets remembered; past it the oldest is forgotten. A server naming a new scope on
/// every refusal would otherwise grow the record for as long as the authorization server
/// stays the same. Forgetting a set costs at most another authorization for it, which the
/// server could have had by naming a new set anyway.
const MAX_SCOPE_SETS: usize = 16;

/// The step-ups made per scope set (the `scope` parameter they asked for), oldest first.
#[derive(Debug, Default)]
pub(super) struct StepUps {
    sets: VecDeque<(String, u32)>,
}

impl StepUps {
    /// Counts a step-up for `scope`; `false` when `max` were made for it already.
    pub(super) fn admit(&mut self, scope: &str, max: u32) -> bool {
        let at = match self.sets.iter().position(|(set, _)| set == scope) {
            Some(at) => at,
            None => {
                if self.sets.len() == MAX_SCOPE_SETS {
                    self.sets.pop_front();
                }
                self.sets.push_back((scope.to_owned(), 0));
                self.sets.len() - 1
            }
        };
        let attempts = &mut self.sets[at].1;
        if *attempts >= max {
            return false;
        }
        *attempts += 1;
        true
    }

    /// Forgets every count: another authorization server's scopes are another matter.
    pub(super) fn clear(&mut self) {
        self.sets.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_set_steps_up_at_most_max_times() {
        let mut step_ups = StepUps::default();
        assert!(step_ups.admit("mcp admin", 2));
        assert!(step_ups.admit("mcp admin", 2));
        assert!(!step_ups.admit("mcp admin", 2));
        assert!(step_ups.admit("mcp other", 2));
        assert!(!step_ups.admit("mcp admin", 2));
    }

    /// A server naming a new scope on every refusal does not grow the record without end.
    #[test]
    fn the_scope_sets_remembered_are_bounded() {
        let mut step_ups = StepUps::default();
        for n in 0..10_000 {
            assert!(step_ups.admit(&format!("mcp scope-{n}"), 2));
        }
        assert!(step_ups.len() <= MAX_SCOPE_SETS, "{}", step_ups.len());
    }
}
