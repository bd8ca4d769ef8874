//! `[[subscription]]` tables: defaults applied, plugin, exchange, retry delays and limits checked.

use super::*;

impl Checker<'_> {
    /// One `[[subscription]]`, each setting taken from the table or else `[defaults]`; every
    /// problem is recorded and a value returned anyway, so one pass reports them all.
    pub(super) fn subscription(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        exchanges: &Exchanges,
        plugins: &Plugins,
        declared: &dyn Fn(&str) -> bool,
    ) -> Subscription {
        let queue = sub.queue.get_ref().0.clone();
        self.check_declarable(&sub.queue, "subscription queue");
        let (plugin, plugin_path) = self.plugin_file(sub, plugins);
        let exchange = self.subscription_exchange(sub, defaults, exchanges, declared);
        let bindings = self.bindings(sub, &queue, exchanges);
        let (retry_delays, max_retries) = self.retries(sub, defaults, &queue);
        let memory_limit = self.memory_limit(sub, defaults);
        let max_message_size = self.max_message_size(sub, defaults);
        let publish = self.publish_exchanges(sub, defaults, &queue, declared);

        Subscription {
            queue,
            plugin,
            plugin_path,
            exchange,
            bindings,
            prefetch: sub
                .prefetch
                .or(defaults.prefetch)
                .map_or(DEFAULT_PREFETCH, |p| p.0),
            concurrency: sub
                .concurrency
                .or(defaults.concurrency)
                .map_or(DEFAULT_CONCURRENCY, |c| c.0),
            max_retries,
            retry_delays,
            timeout: sub
                .timeout
                .as_ref()
                .or(defaults.timeout.as_ref())
                .map_or(DEFAULT_TIMEOUT, |t| t.duration),
            memory_limit,
            max_message_size,
            queue_type: sub.queue_type.or(defaults.queue_type).unwrap_or_default(),
            instance: sub.instance.or(defaults.instance).unwrap_or_default(),
            instance_max_messages: sub
                .instance_max_messages
                .or(defaults.instance_max_messages)
                .map_or(DEFAULT_INSTANCE_MAX_MESSAGES, |n| n.0),
            publish,
            pause: self.pause(sub, defaults),
            grants: Default::default(),
            config: sub.config.as_ref().map_or_else(
                || serde_json::Value::Object(Default::default()),
                |t| toml_to_json(toml::Value::Table(t.clone())),
            ),
        }
    }

    /// `pause_after` (with `pause_for`, default 30s); `pause_for` alone is an error.
    fn pause(&mut self, sub: &RawSubscription, defaults: &RawSettings) -> Option<Pause> {
        let after = sub.pause_after.or(defaults.pause_after);
        let pause_for = sub.pause_for.as_ref().or(defaults.pause_for.as_ref());
        if after.is_none()
            && let Some(p) = pause_for
        {
            self.error(
                Some(p.span()),
                "pause_for is set but pause_after is not: add pause_after = N",
            );
        }
        after.map(|n| Pause {
            after: n.0,
            pause_for: pause_for.map_or(DEFAULT_PAUSE_FOR, |p| p.get_ref().duration),
        })
    }

    /// The plugin: a bare `.wasm` file name inside plugins.dir, so a config cannot point the
    /// host at an arbitrary file. Returns the name and its path.
    fn plugin_file(&mut self, sub: &RawSubscription, plugins: &Plugins) -> (String, PathBuf) {
        let plugin = sub.plugin.get_ref().clone();
        let plugin_span = Some(sub.plugin.span());
        let plugin_path = plugins.dir.join(&plugin);
        if plugin.is_empty()
            || plugin.contains(['/', '\\'])
            || plugin == ".."
            || !plugin.ends_with(".wasm")
        {
            self.error(
                plugin_span,
                format!("expected a .wasm file name in plugins.dir, got {plugin:?}"),
            );
        } else if plugins.dir.is_dir() && !plugin_path.is_file() {
            self.error(
                plugin_span,
                format!(
                    "plugin \"{plugin}\" not found in plugins.dir ({})",
                    plugins.dir.display()
                ),
            );
        }
        (plugin, plugin_path)
    }

    /// The exchange the queue is bound to: exchanges.master unless set; any other must be
    /// declared in this file, since the host binds to it at startup.
    fn subscription_exchange(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        exchanges: &Exchanges,
        declared: &dyn Fn(&str) -> bool,
    ) -> String {
        let set = sub.exchange.as_ref().or(defaults.exchange.as_ref());
        let exchange = set.map_or_else(|| exchanges.master.clone(), |e| e.get_ref().0.clone());
        if exchange != exchanges.master && !declared(&exchange) {
            self.error(
                set.map(|e| e.span()),
                format!(
                    "exchange \"{exchange}\" is neither exchanges.master (\"{}\") nor declared \
                     in an [[exchange]] table",
                    exchanges.master
                ),
            );
        }
        exchange
    }

    /// The binding keys; none is allowed but worth a warning, as the queue then only sees
    /// messages addressed to its own name.
    fn bindings(
        &mut self,
        sub: &RawSubscription,
        queue: &str,
        exchanges: &Exchanges,
    ) -> Vec<String> {
        let bindings: Vec<String> = sub.bindings.iter().map(|k| k.0.clone()).collect();
        if bindings.is_empty() {
            self.warn(
                Some(sub.queue.span()),
                format!(
                    "subscription \"{queue}\" has no bindings: only messages published to \
                     \"{}\" with routing key \"{queue}\" reach it",
                    exchanges.master
                ),
            );
        }
        bindings
    }

    /// The retry delays and max_retries. Each delay becomes a queue TTL, so RabbitMQ's TTL
    /// ceiling applies; delays beyond max_retries are warned about, as they are never used.
    fn retries(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        queue: &str,
    ) -> (Vec<RetryDelay>, u32) {
        let retry_delays = match sub.retry_delays.as_ref().or(defaults.retry_delays.as_ref()) {
            Some(list) => {
                if list.get_ref().is_empty() {
                    self.error(
                        Some(list.span()),
                        "expected at least one retry delay, e.g. retry_delays = [\"30s\"]",
                    );
                }
                for d in list.get_ref() {
                    self.check_ttl(d, Some(list.span()), "retry delay");
                }
                list.get_ref().iter().map(to_retry_delay).collect()
            }
            None => vec![RetryDelay {
                text: DEFAULT_RETRY_DELAY.into(),
                duration: Duration::from_secs(30),
            }],
        };
        let max_retries = sub
            .max_retries
            .or(defaults.max_retries)
            .map_or(DEFAULT_MAX_RETRIES, |m| m.0);
        if let Some(list) = &sub.retry_delays
            && list.get_ref().len() > max_retries as usize
        {
            self.warn(
                Some(list.span()),
                format!(
                    "subscription \"{queue}\" lists {} retry delays but max_retries is \
                     {max_retries}; the extra delays are never used",
                    list.get_ref().len()
                ),
            );
        }
        (retry_delays, max_retries)
    }

    /// memory_limit in bytes: at least one wasm page, at most what a wasm32 module can address.
    fn memory_limit(&mut self, sub: &RawSubscription, defaults: &RawSettings) -> u64 {
        let Some(limit) = sub.memory_limit.as_ref().or(defaults.memory_limit.as_ref()) else {
            return DEFAULT_MEMORY_LIMIT;
        };
        let bytes = limit.get_ref().0;
        if !(MIN_MEMORY_LIMIT..=MAX_MEMORY_LIMIT).contains(&bytes) {
            self.error(
                Some(limit.span()),
                format!(
                    "expected memory_limit between 64KiB and 4GiB (a wasm32 plugin's \
                     address space), got {bytes} bytes"
                ),
            );
        }
        bytes
    }

    /// max_message_size in bytes: at least one, at most RabbitMQ's own body ceiling.
    fn max_message_size(&mut self, sub: &RawSubscription, defaults: &RawSettings) -> u64 {
        let set = sub
            .max_message_size
            .as_ref()
            .or(defaults.max_message_size.as_ref());
        let Some(size) = set else {
            return DEFAULT_MAX_MESSAGE_SIZE;
        };
        let bytes = size.get_ref().0;
        if !(1..=MAX_MAX_MESSAGE_SIZE).contains(&bytes) {
            self.error(
                Some(size.span()),
                format!(
                    "expected max_message_size between 1B and 512MiB (RabbitMQ's own \
                     ceiling), got {bytes} bytes"
                ),
            );
        }
        bytes
    }

    /// The exchanges the plugin may publish to. One this file does not declare is only warned
    /// about: it may exist on the broker already.
    fn publish_exchanges(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        queue: &str,
        declared: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let publish = sub.publish.as_ref().or(defaults.publish.as_ref());
        let mut names = Vec::new();
        for ex in publish.into_iter().flatten() {
            let name = ex.get_ref().0.clone();
            if !declared(&name) {
                self.warn(
                    Some(ex.span()),
                    format!(
                        "the plugin of \"{queue}\" may publish to exchange \"{name}\", which this \
                         file does not declare; its publishes fail unless it exists"
                    ),
                );
            }
            names.push(name);
        }
        names
    }

    pub(super) fn check_ttl(&mut self, d: &DurationText, span: Option<Range<usize>>, what: &str) {
        if d.duration > MAX_TTL {
            self.error(
                span,
                format!(
                    "{what} \"{}\" is longer than 10 years, which RabbitMQ refuses as a TTL",
                    d.text
                ),
            );
        }
    }
}
