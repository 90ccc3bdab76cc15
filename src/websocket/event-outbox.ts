/**
 * The subscription events waiting for one client connection, between the subscription hub and
 * the client's socket, and the process-wide budget every connection's queue draws from.
 *
 * The first {@link CHARGES_AHEAD} events of a queue have their charge asked of the ledger (the
 * pending charges); an event is written once it reaches the head of the queue, its charge is
 * granted and the socket's unsent bytes are under {@link SEND_WATERMARK_BYTES}:
 * a client that reads slowly holds its backlog here, as small records that share the event's JSON
 * with every other subscriber, not as a copy of each frame in its socket's buffer, nor as
 * thousands of charges in flight. Each queue is bounded in events and bytes
 * (queued frames plus the socket's unsent bytes), and all queues together in events and bytes.
 * Past a bound the connection is told to close (1013) and its queue is dropped at once: every
 * dropped event gives its charge back, nothing is sent or charged for it, and none is ever
 * left out of a stream silently.
 */

/**
 * Unsent bytes a socket may hold before the next event waits for it to drain. Small, so that a
 * client that does not read holds at most this much (plus one frame) in its socket buffer while
 * its close frame waits behind it.
 */
export const SEND_WATERMARK_BYTES = 16 * 1024;

/**
 * Events of one queue whose charges are asked ahead of their turn: the next one is charged while
 * the current one waits for its grant, so a connection takes two events per ledger batch. Asking
 * for more (a charge per queued event, as an earlier version did) made bursts hold tens of
 * thousands of pending charges and their promises at once: the gateway's RSS grew 2-3x as much
 * under the bursts measured in docs/websocket.md, for no gain in events per second.
 */
export const CHARGES_AHEAD = 2;

export interface OutboxItem {
  /** The frame's size in bytes, as it will be written. */
  bytes: number;
}

export type OverflowScope = 'connection' | 'process';

export interface EventOutboxOptions<T extends OutboxItem> {
  maxEvents: number;
  /** Bytes of queued frames plus the socket's unsent bytes. */
  maxBytes: number;
  budget: QueueBudget;
  /** The socket's unsent bytes (ws's `bufferedAmount`). */
  unsent(): number;
  /** Resolves once the socket's buffer drained, or the socket is gone. */
  drained(): Promise<void>;
  /** Asks for the item's charge (called once per item, at most {@link CHARGES_AHEAD} ahead of the head). */
  charge(item: T): void;
  /** Waits for the item's charge and writes it (or accounts for not writing it). */
  send(item: T): Promise<void>;
  /** The item will never be sent: gives its charge back. */
  drop(item: T): void;
  /** A bound was passed: the queue is already dropped; the connection must close (1013). */
  overflow(scope: OverflowScope, events: number, bytes: number): void;
}

export interface EventOutbox<T extends OutboxItem> {
  /** Queues an event; false when it was dropped (a bound was passed, or the outbox is closed). */
  push(item: T): boolean;
  /** Events waiting. */
  readonly events: number;
  /** Bytes of the frames waiting. */
  readonly bytes: number;
  /** Drops every waiting event and takes no more (the connection is closing). */
  close(): void;
}

/** What the process-wide budget sees of one outbox. */
interface Member {
  readonly events: number;
  readonly bytes: number;
  /** Dropped for the process bound. */
  evict(): void;
}

export interface QueueBudget {
  /** Events waiting in every queue. */
  readonly events: number;
  /** Bytes waiting in every queue. */
  readonly bytes: number;
  join(member: Member): () => void;
  change(events: number, bytes: number): void;
  /** Past a bound: the queues holding the most bytes (the slowest clients) are dropped until under it. */
  enforce(): void;
}

export function createQueueBudget(limits: { maxEvents: number; maxBytes: number }): QueueBudget {
  const members = new Set<Member>();
  let events = 0;
  let bytes = 0;
  let enforcing = false;
  return {
    get events() {
      return events;
    },
    get bytes() {
      return bytes;
    },
    join(member) {
      members.add(member);
      return () => members.delete(member);
    },
    change(deltaEvents, deltaBytes) {
      events += deltaEvents;
      bytes += deltaBytes;
    },
    enforce() {
      if (enforcing) return;
      enforcing = true;
      try {
        while ((events > limits.maxEvents || bytes > limits.maxBytes) && members.size > 0) {
          let largest: Member | undefined;
          for (const member of members) if (largest === undefined || member.bytes > largest.bytes) largest = member;
          if (largest === undefined || largest.events === 0) break;
          members.delete(largest);
          largest.evict();
        }
      } finally {
        enforcing = false;
      }
    },
  };
}

export function createEventOutbox<T extends OutboxItem>(options: EventOutboxOptions<T>): EventOutbox<T> {
  const { budget } = options;
  // A FIFO over an array: `head` is the next item; the array is compacted as it is consumed.
  let items: Array<T | undefined> = [];
  let head = 0;
  /** Items before this index have been charged. */
  let charged = 0;
  let bytes = 0;
  let pumping = false;
  let closed = false;

  const waiting = () => items.length - head;
  const member: Member = {
    get events() {
      return waiting();
    },
    get bytes() {
      return bytes;
    },
    evict: () => overflow('process'),
  };
  const leave = budget.join(member);

  function dropAll(): void {
    const dropped = { events: waiting(), bytes };
    const queued = items;
    const from = head;
    items = [];
    head = 0;
    charged = 0;
    bytes = 0;
    budget.change(-dropped.events, -dropped.bytes);
    for (let index = from; index < queued.length; index += 1) options.drop(queued[index]!);
  }

  function overflow(scope: OverflowScope): void {
    if (closed) return;
    closed = true;
    leave();
    // Told first, so the drops that follow are counted against the close's reason.
    options.overflow(scope, waiting(), bytes);
    dropAll();
  }

  function chargeAhead(): void {
    const until = Math.min(items.length, head + CHARGES_AHEAD);
    for (charged = Math.max(charged, head); charged < until; charged += 1) options.charge(items[charged]!);
  }

  async function pump(): Promise<void> {
    pumping = true;
    try {
      while (!closed && waiting() > 0) {
        if (options.unsent() > SEND_WATERMARK_BYTES) {
          await options.drained();
          continue;
        }
        const item = items[head]!;
        items[head] = undefined;
        head += 1;
        bytes -= item.bytes;
        budget.change(-1, -item.bytes);
        if (head > 1024 && head * 2 > items.length) {
          items = items.slice(head);
          charged -= head;
          head = 0;
        }
        chargeAhead();
        await options.send(item);
      }
    } finally {
      pumping = false;
    }
  }

  return {
    push(item) {
      if (closed) {
        options.drop(item);
        return false;
      }
      items.push(item);
      bytes += item.bytes;
      budget.change(1, item.bytes);
      if (waiting() > options.maxEvents || bytes + options.unsent() > options.maxBytes) {
        overflow('connection');
        return false;
      }
      budget.enforce();
      if (closed) return false;
      chargeAhead();
      if (!pumping) void pump();
      return true;
    },
    get events() {
      return waiting();
    },
    get bytes() {
      return bytes;
    },
    close() {
      if (closed) return;
      closed = true;
      leave();
      dropAll();
    },
  };
}
