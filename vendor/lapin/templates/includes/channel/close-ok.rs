/// Acknowledgement of a `channel.close` request; the channel is now closed.
