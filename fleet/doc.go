// Package fleet lets several batcherd replicas spend one provider's limits
// as one: it implements batcher.Coordinator over Redis
// (github.com/redis/go-redis/v9).
//
// What the fleet shares, per backend, under one key prefix:
//
//   - The RPM and TPM budgets, as GCRA buckets in Redis (scripts.go). A
//     batch books its requests and estimated tokens, and one concurrency
//     lease, in one round trip before it goes upstream, and is told how long
//     to wait when the fleet is ahead of the budget; it settles in a second
//     round trip after the upstream answered: unused tokens are refunded,
//     tokens used beyond the estimate are booked. Two round trips a batch,
//     whatever its size: the batch is the chunk.
//   - Concurrency, as leases that expire: a replica renews its own with
//     each heartbeat, so a dead replica's slots come back within the TTL.
//     A booking that finds every lease taken waits in the backend's queue,
//     first come first served across the fleet, and does not poll: the
//     replica that frees a slot books the head waiter in its release and
//     tells the waiter's replica on that replica's pub/sub channel, so a
//     batch that waited still costs two round trips. A lost message is
//     found by the waiter's replica at its next heartbeat; a waiter whose
//     batch ends leaves the queue (a lease handed to it meanwhile is
//     released); a dead replica's waiters and handed leases lapse with the
//     TTL.
//   - What one replica learns: a 429's Retry-After pauses every replica's
//     next booking; a 429 halves the fleet's adaptive factor on configured
//     rates (successes climb it back); x-ratelimit-remaining readings drain
//     the shared bucket; an open breaker holds the backend open fleet-wide
//     for its cooldown. Each reaches another replica with that replica's
//     next booking: within one round trip.
//   - Membership: each replica heartbeats with a TTL, so each knows N.
//
// Each backend's own budget (the core's buckets and concurrency) holds 1/N
// of every limit; each booking then sets it to what the fleet has left and
// to the slots the other replicas leave, so that a busy replica borrows
// what idle ones do not use, while the replicas' own grants rarely run
// ahead of the fleet's (which would cost waits in the lease queue).
//
// Guarantees. No request fails because Redis is down: a command that fails
// (or takes longer than the timeout, 300 ms by default) puts the replica
// into local mode, where every backend holds its 1/N of each budget (N as
// last known) and no more, and batches go without asking Redis; a metric
// (batcher.fleet.redis.up, batcher.fleet.local_modes) and a log line say
// so. A replica that starts while Redis is away knows no N and holds the
// whole budget until it reaches Redis once. The heartbeat keeps trying, and the replica rejoins when Redis
// answers. Overshoot while Redis is away is bounded by the fleet's bursts
// plus what was in flight when it went.
//
// The core (package batcher) does not import Redis: it sees only the
// batcher.Coordinator interface.
//
// Files: fleet.go (Fleet, Open, New, Start, Close), options.go (Option,
// defaults), heartbeat.go (the heartbeat, local mode and rejoining),
// budget.go (a backend's shared budget), scripts.go (the Lua scripts that
// book and settle it), waiters.go (grants delivered to waiting lanes),
// status.go (Status, Counters), metrics.go (the fleet's instruments).
package fleet
