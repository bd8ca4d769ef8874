//! `[[exchange]]` and `[[queue]]` tables, and the uniqueness of every queue name.

use super::*;

impl Checker<'_> {
    pub(super) fn exchanges_extra(
        &mut self,
        raw: &RawConfig,
        builtin: &Exchanges,
    ) -> Vec<ExchangeDecl> {
        let mut out: Vec<ExchangeDecl> = Vec::new();
        let mut first: HashMap<&str, Range<usize>> = HashMap::new();
        for ex in &raw.exchanges_extra {
            let name = &ex.name.get_ref().0;
            self.check_declarable(&ex.name, "[[exchange]] name");
            if [&builtin.master, &builtin.retry, &builtin.failed].contains(&name) {
                self.error(
                    Some(ex.name.span()),
                    format!(
                        "exchange \"{name}\" is declared by the host (a durable topic exchange); \
                         remove this [[exchange]]"
                    ),
                );
            }
            if let Some(prev) = first.get(name.as_str()) {
                let at = self.at_line(&Some(prev.clone()));
                self.error(
                    Some(ex.name.span()),
                    format!("duplicate [[exchange]] \"{name}\" (first{at})"),
                );
                continue;
            }
            first.insert(name, ex.name.span());
            out.push(ExchangeDecl {
                name: name.clone(),
                kind: ex.kind,
                durable: ex.durable,
            });
        }
        out
    }

    /// One `[[queue]]`: its type, dead-lettering and bindings checked, problems recorded.
    pub(super) fn queue(&mut self, q: &RawQueue, declared: &dyn Fn(&str) -> bool) -> QueueDecl {
        let name = q.name.get_ref().0.clone();
        self.check_declarable(&q.name, "[[queue]] name");
        let queue_type = self.queue_type(q, &name);
        if let Some(ttl) = &q.message_ttl {
            self.check_ttl(ttl.get_ref(), Some(ttl.span()), "message_ttl");
        }
        self.check_dead_lettering(q, &name, declared);
        let bindings = self.queue_bindings(q, &name, declared);
        QueueDecl {
            name,
            durable: q.durable,
            message_ttl: q.message_ttl.as_ref().map(|t| t.get_ref().duration),
            dead_letter_exchange: q.dead_letter_exchange.as_ref().map(|d| d.get_ref().clone()),
            dead_letter_routing_key: q
                .dead_letter_routing_key
                .as_ref()
                .map(|k| k.get_ref().0.clone()),
            max_length: q.max_length.map(|m| m.0),
            queue_type,
            bindings,
        }
    }

    /// Classic unless set; a quorum queue cannot be transient, so `durable = false` is refused
    /// here rather than by RabbitMQ at startup.
    fn queue_type(&mut self, q: &RawQueue, name: &str) -> QueueType {
        let queue_type = q
            .queue_type
            .as_ref()
            .map_or(QueueType::Classic, |t| *t.get_ref());
        if queue_type == QueueType::Quorum && !q.durable {
            self.error(
                q.queue_type.as_ref().map(|t| t.span()),
                format!(
                    "queue \"{name}\": quorum queues are always durable; remove durable = false"
                ),
            );
        }
        queue_type
    }

    /// The dead-letter exchange and key: RabbitMQ silently drops what it dead-letters to a
    /// missing exchange, and refuses a key without an exchange.
    fn check_dead_lettering(&mut self, q: &RawQueue, name: &str, declared: &dyn Fn(&str) -> bool) {
        if let Some(dlx) = &q.dead_letter_exchange {
            let dlx_name = dlx.get_ref();
            if dlx_name.len() > MAX_NAME_BYTES {
                self.error(
                    Some(dlx.span()),
                    format!("expected an exchange name of at most {MAX_NAME_BYTES} bytes"),
                );
            } else if !dlx_name.is_empty() && !declared(dlx_name) {
                self.warn(
                    Some(dlx.span()),
                    format!(
                        "queue \"{name}\" dead-letters to exchange \"{dlx_name}\", which this file \
                         does not declare; RabbitMQ drops dead-lettered messages if it does not exist"
                    ),
                );
            }
        }
        if let (Some(key), None) = (&q.dead_letter_routing_key, &q.dead_letter_exchange) {
            self.error(
                Some(key.span()),
                format!(
                    "queue \"{name}\" sets dead_letter_routing_key without dead_letter_exchange \
                     (RabbitMQ refuses that; use dead_letter_exchange = \"\" for the default exchange)"
                ),
            );
        }
    }

    /// The queue's bindings; each must name an exchange declared here, as the host binds them
    /// at startup (and the default exchange cannot be bound at all).
    fn queue_bindings(
        &mut self,
        q: &RawQueue,
        name: &str,
        declared: &dyn Fn(&str) -> bool,
    ) -> Vec<BindingDecl> {
        let mut bindings = Vec::new();
        for b in &q.bindings {
            let exchange = b.exchange.get_ref();
            if exchange.is_empty() {
                self.error(
                    Some(b.exchange.span()),
                    "expected an exchange name: the default exchange \"\" cannot be bound",
                );
            } else if !declared(exchange) {
                self.error(
                    Some(b.exchange.span()),
                    format!(
                        "queue \"{name}\" binds to exchange \"{exchange}\", which is not declared \
                         (expected exchanges.master/retry/failed or an [[exchange]] name)"
                    ),
                );
            }
            bindings.push(BindingDecl {
                exchange: exchange.clone(),
                key: b.key.0.clone(),
            });
        }
        bindings
    }

    /// Every queue name — subscription queues, their derived retry and failed queues, and
    /// `[[queue]]` names — must be unique and fit in 255 bytes.
    pub(super) fn check_queue_names(&mut self, raw: &RawConfig, subs: &[Subscription]) {
        let claims = queue_claims(raw, subs);
        let mut taken: HashMap<&str, &Claim> = HashMap::new();
        for (name, claim) in &claims {
            if name.len() > MAX_NAME_BYTES {
                self.error(
                    claim.span.clone(),
                    format!(
                        "{} would be named \"{name}\", longer than {MAX_NAME_BYTES} bytes; \
                         shorten the queue name or the delay",
                        claim.what
                    ),
                );
                continue;
            }
            let Some(prev) = taken.get(name.as_str()) else {
                taken.insert(name, claim);
                continue;
            };
            self.clash(claim, prev);
        }
    }

    /// Two claims on one queue name. Blames the name the user wrote, so the message says what
    /// to rename.
    fn clash(&mut self, claim: &Claim, prev: &Claim) {
        let (blamed, other) = if claim.explicit || !prev.explicit {
            (claim, prev)
        } else {
            (prev, claim)
        };
        let at = self.at_line(&other.span);
        let message = if blamed.what == other.what {
            format!("duplicate {} (first{at})", blamed.what)
        } else {
            format!("{} clashes with {}{at}", blamed.what, other.what)
        };
        self.error(blamed.span.clone(), message);
    }
}

/// Every queue name the config claims, in file order: each subscription queue with its failed
/// and retry queues, then the `[[queue]]` names.
fn queue_claims(raw: &RawConfig, subs: &[Subscription]) -> Vec<(String, Claim)> {
    let mut claims: Vec<(String, Claim)> = Vec::new();
    let mut seen_subs = std::collections::HashSet::new();
    for (sub, raw_sub) in subs.iter().zip(&raw.subscriptions) {
        let span = Some(raw_sub.queue.span());
        claims.push((
            sub.queue.clone(),
            Claim {
                what: format!("subscription queue \"{}\"", sub.queue),
                span: span.clone(),
                explicit: true,
            },
        ));
        // A duplicate subscription is reported once, not again for each derived queue.
        if !seen_subs.insert(sub.queue.as_str()) {
            continue;
        }
        claims.push((
            sub.failed_queue(),
            Claim {
                what: format!("the failed queue of subscription \"{}\"", sub.queue),
                span: span.clone(),
                explicit: false,
            },
        ));
        for d in sub.distinct_retry_delays() {
            claims.push((
                sub.retry_queue_name(d),
                Claim {
                    what: format!(
                        "the {} retry queue of subscription \"{}\"",
                        d.text, sub.queue
                    ),
                    span: span.clone(),
                    explicit: false,
                },
            ));
        }
    }
    for q in &raw.queues_extra {
        claims.push((
            q.name.get_ref().0.clone(),
            Claim {
                what: format!("[[queue]] \"{}\"", q.name.get_ref().0),
                span: Some(q.name.span()),
                explicit: true,
            },
        ));
    }
    claims
}
