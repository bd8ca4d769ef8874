/// Server confirmation of `queue.purge`, returning the number of messages deleted.
