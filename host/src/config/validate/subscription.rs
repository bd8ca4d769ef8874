//! `[[subscription]]` tables: defaults applied, plugin, exchange, retry delays and limits checked.

use super::*;

impl Checker<'_> {
    pub(super) fn subscription(
        &mut self,
        sub: &RawSubscription,
        defaults: &RawSettings,
        exchanges: &Exchanges,
        plugins: &Plugins,
        declared: &dyn Fn(&str) -> bool,
    ) -> Subscription {
        let queue = sub.queue.get_ref().0.clone();
        let queue_span = Some(sub.queue.span());
        self.check_declarable(&sub.queue, "subscription queue");

        // The plugin: a file name inside plugins.dir.
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

        let exchange = sub
            .exchange
            .as_ref()
            .or(defaults.exchange.as_ref())
            .map_or_else(|| exchanges.master.clone(), |e| e.get_ref().0.clone());
        if exchange != exchanges.master && !declared(&exchange) {
            let span = sub
                .exchange
                .as_ref()
                .or(defaults.exchange.as_ref())
                .map(|e| e.span());
            self.error(
                span,
                format!(
                    "exchange \"{exchange}\" is neither exchanges.master (\"{}\") nor declared \
                     in an [[exchange]] table",
                    exchanges.master
                ),
            );
        }

        let bindings: Vec<String> = sub.bindings.iter().map(|k| k.0.clone()).collect();
        if bindings.is_empty() {
            self.warn(
                queue_span.clone(),
                format!(
                    "subscription \"{queue}\" has no bindings: only messages published to \
                     \"{}\" with routing key \"{queue}\" reach it",
                    exchanges.master
                ),
            );
        }

        let retry_delays_raw = sub.retry_delays.as_ref().or(defaults.retry_delays.as_ref());
        let retry_delays: Vec<RetryDelay> = match retry_delays_raw {
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

        let memory_limit = sub.memory_limit.as_ref().or(defaults.memory_limit.as_ref());
        if let Some(limit) = memory_limit {
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
        }

        let max_message_size = sub
            .max_message_size
            .as_ref()
            .or(defaults.max_message_size.as_ref());
        if let Some(size) = max_message_size {
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
        }

        let publish = sub.publish.as_ref().or(defaults.publish.as_ref());
        let mut publish_names = Vec::new();
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
            publish_names.push(name);
        }

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
            memory_limit: memory_limit.map_or(DEFAULT_MEMORY_LIMIT, |m| m.get_ref().0),
            max_message_size: max_message_size.map_or(DEFAULT_MAX_MESSAGE_SIZE, |m| m.get_ref().0),
            queue_type: sub.queue_type.or(defaults.queue_type).unwrap_or_default(),
            publish: publish_names,
            config: sub.config.as_ref().map_or_else(
                || serde_json::Value::Object(Default::default()),
                |t| toml_to_json(toml::Value::Table(t.clone())),
            ),
        }
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
