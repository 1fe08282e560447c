// A Java member of `handoff bench rebalance` (the slow-loop case, issue 26), written like the Python members
// in kafka_handoff/bench/rebalance.py: a poll loop hands records to a thread pool (at most in-flight records
// of a partition at once), offsets are committed in order as processing completes, every loop iteration
// also takes loop-ms.  Java has no way to delay a revoke, so it uses the standard pattern:
// onPartitionsRevoked stops starting records of the revoked partitions, waits for their in-flight records
// and commits what was processed (inside poll(), so no record of any partition starts meanwhile).
// It writes the same JSON log as the Python members (events, processed records, slow polls).
// Compiled at bench time against the cached kafka-clients jar (kafka_handoff.bench.peers.slow_loop_member_classes).

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class SlowLoopMember {

    /** The in-order commit position of one partition (the Python members' OffsetTracker). */
    static final class Tracker {
        private final ArrayDeque<Long> order = new ArrayDeque<>();
        private final Set<Long> open = new HashSet<>();
        private final Set<Long> done = new HashSet<>();
        private Long committable;

        synchronized void started(long offset) {
            order.addLast(offset);
            open.add(offset);
        }

        synchronized void finished(long offset) {
            open.remove(offset);
            done.add(offset);
            while (!order.isEmpty() && done.contains(order.peekFirst())) {
                long first = order.pollFirst();
                done.remove(first);
                committable = first + 1;
            }
        }

        synchronized Long committable() {
            return committable;
        }

        synchronized int inFlight() {
            return open.size();
        }
    }

    static final class Part {
        final ArrayDeque<Long> queued = new ArrayDeque<>();
        final Tracker tracker = new Tracker();
        final Set<Future<?>> futures = ConcurrentHashMap.newKeySet();
        Long committed;
        Long sent;
        boolean revoking;
        boolean abandoned;
    }

    private final String name;
    private final String topic;
    private final Map<String, String> opts;
    private final double workMs;
    private final int slowEvery;
    private final double slowMs;
    private final int inFlight;
    private final Map<Integer, Part> parts = new HashMap<>();
    private final ExecutorService pool;
    private final List<double[]> processed = new ArrayList<>();
    private final List<double[]> slowPolls = new ArrayList<>();
    private final List<Object[]> events = new ArrayList<>();
    private final AtomicInteger discarded = new AtomicInteger();
    private KafkaConsumer<byte[], byte[]> consumer;

    SlowLoopMember(Map<String, String> opts) {
        this.opts = opts;
        this.name = opts.get("name");
        this.topic = opts.get("topic");
        this.workMs = Double.parseDouble(opts.get("work-ms"));
        this.slowEvery = Integer.parseInt(opts.get("slow-every"));
        this.slowMs = Double.parseDouble(opts.get("slow-ms"));
        this.inFlight = Integer.parseInt(opts.get("in-flight"));
        this.pool = Executors.newFixedThreadPool(Integer.parseInt(opts.get("workers")));
    }

    static double now() {
        return System.currentTimeMillis() / 1000.0;
    }

    synchronized void event(String kind, Collection<Integer> partitions) {
        List<Integer> sorted = new ArrayList<>(new TreeSet<>(partitions));
        events.add(new Object[] {now(), kind, sorted});
    }

    static List<Integer> numbers(Collection<TopicPartition> partitions) {
        List<Integer> out = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            out.add(tp.partition());
        }
        return out;
    }

    double workS(int partition, long offset) {
        if (slowEvery > 0 && (offset + 37L * partition) % slowEvery == slowEvery - 1) {
            return slowMs / 1000.0;
        }
        return workMs / 1000.0;
    }

    void queue(int partition, long offset) {
        Part p = parts.computeIfAbsent(partition, k -> new Part());
        if (!p.revoking && !p.abandoned) {
            p.queued.addLast(offset);
        }
    }

    void startWork() {
        for (Map.Entry<Integer, Part> e : parts.entrySet()) {
            int partition = e.getKey();
            Part p = e.getValue();
            if (p.revoking || p.abandoned) {
                continue;
            }
            p.futures.removeIf(Future::isDone);
            while (!p.queued.isEmpty() && p.tracker.inFlight() < inFlight) {
                long offset = p.queued.pollFirst();
                p.tracker.started(offset);
                Future<?>[] self = new Future<?>[1];
                self[0] = pool.submit(() -> run(partition, p, offset, self));
                p.futures.add(self[0]);
            }
        }
    }

    private void run(int partition, Part p, long offset, Future<?>[] self) {
        try {
            Thread.sleep((long) Math.round(workS(partition, offset) * 1000.0));
        } catch (InterruptedException exc) {
            Thread.currentThread().interrupt();
        }
        synchronized (p) { // against abandon(): a result is recorded before the partition is abandoned, or never
            if (p.abandoned) {
                discarded.incrementAndGet();
            } else {
                synchronized (processed) {
                    processed.add(new double[] {now(), partition, offset});
                }
                p.tracker.finished(offset);
            }
        }
        Future<?> f = self[0];
        if (f != null) {
            p.futures.remove(f);
        }
    }

    Map<Integer, Long> commitPositions(Collection<Integer> partitions, boolean force) {
        Map<Integer, Long> out = new HashMap<>();
        for (int partition : partitions == null ? new ArrayList<>(parts.keySet()) : partitions) {
            Part p = parts.get(partition);
            if (p == null || p.abandoned) {
                continue;
            }
            Long position = p.tracker.committable();
            if (position == null || position.equals(p.committed) || (position.equals(p.sent) && !force)) {
                continue;
            }
            out.put(partition, position);
        }
        return out;
    }

    Map<TopicPartition, OffsetAndMetadata> tps(Map<Integer, Long> offsets) {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        offsets.forEach((p, o) -> out.put(new TopicPartition(topic, p), new OffsetAndMetadata(o)));
        return out;
    }

    void markCommitted(Map<Integer, Long> offsets) {
        offsets.forEach((partition, offset) -> {
            Part p = parts.get(partition);
            if (p != null) {
                p.committed = p.committed == null ? offset : Math.max(offset, p.committed);
            }
        });
    }

    void stopStarting(Collection<Integer> partitions) {
        for (int partition : partitions) {
            Part p = parts.get(partition);
            if (p != null) {
                p.revoking = true;
                p.queued.clear();
            }
        }
    }

    void waitInFlight(Collection<Integer> partitions) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        for (int partition : partitions) {
            Part p = parts.get(partition);
            if (p == null) {
                continue;
            }
            for (Future<?> f : new ArrayList<>(p.futures)) {
                try {
                    f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (Exception exc) {
                    // timed out, cancelled or interrupted: commit what finished
                }
            }
        }
    }

    void abandon(Collection<Integer> partitions) {
        for (int partition : partitions) {
            Part p = parts.remove(partition);
            if (p != null) {
                synchronized (p) {
                    p.abandoned = true;
                }
                p.queued.clear();
                for (Future<?> f : new ArrayList<>(p.futures)) {
                    f.cancel(false);
                }
            }
        }
    }

    final class Listener implements ConsumerRebalanceListener {
        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            for (TopicPartition tp : partitions) {
                parts.computeIfAbsent(tp.partition(), k -> new Part());
            }
            event("assigned", numbers(partitions));
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            // The standard pattern: wait here (inside poll()) for the revoked partitions' work, then commit.
            List<Integer> ps = numbers(partitions);
            event("revoke_requested", ps);
            stopStarting(ps);
            waitInFlight(ps);
            Map<Integer, Long> last = commitPositions(ps, true);
            if (!last.isEmpty()) {
                try {
                    consumer.commitSync(tps(last));
                    markCommitted(last);
                } catch (KafkaException exc) {
                    System.err.println(name + ": final commit failed: " + exc);
                }
            }
            for (int partition : ps) {
                parts.remove(partition);
            }
            event("revoked", ps);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            List<Integer> ps = numbers(partitions);
            abandon(ps);
            event("lost", ps);
        }
    }

    void runLoop(CountDownLatch stop) throws InterruptedException {
        String protocol = opts.get("protocol");
        int maxPollInterval = Integer.parseInt(opts.get("max-poll-interval-ms"));
        Properties props = new Properties();
        props.put("bootstrap.servers", opts.get("bootstrap-servers"));
        props.put("group.id", opts.get("group"));
        props.put("group.protocol", protocol);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("client.id", name);
        props.put("max.poll.interval.ms", Integer.toString(maxPollInterval));
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        if (protocol.equals("classic")) {
            props.put("partition.assignment.strategy",
                    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
            props.put("session.timeout.ms", Integer.toString(Math.min(45_000, maxPollInterval)));
        }
        long pollTimeoutMs = Math.round(Double.parseDouble(opts.get("poll-timeout")) * 1000.0);
        long commitIntervalNs = Math.round(Double.parseDouble(opts.get("commit-interval")) * 1e9);
        long loopMs = Math.round(Double.parseDouble(opts.get("loop-ms")));
        consumer = new KafkaConsumer<>(props);
        event("subscribe", List.of());
        consumer.subscribe(List.of(topic), new Listener());
        long nextCommit = 0;
        System.out.println("ready");
        System.out.flush();
        while (stop.getCount() > 0) {
            double tPoll = now();
            ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(pollTimeoutMs));
            double took = now() - tPoll;
            if (took > 0.05) {
                slowPolls.add(new double[] {tPoll, took});
            }
            for (ConsumerRecord<byte[], byte[]> r : records) {
                queue(r.partition(), r.offset());
            }
            startWork();
            long t = System.nanoTime();
            if (t >= nextCommit) {
                nextCommit = t + commitIntervalNs;
                Map<Integer, Long> offsets = commitPositions(null, false);
                if (!offsets.isEmpty()) {
                    offsets.forEach((partition, offset) -> parts.get(partition).sent = offset);
                    consumer.commitAsync(tps(offsets), (done, exc) -> {
                        if (exc == null) {
                            Map<Integer, Long> ok = new HashMap<>();
                            done.forEach((tp, om) -> ok.put(tp.partition(), om.offset()));
                            markCommitted(ok);
                        } else {
                            for (TopicPartition tp : done.keySet()) {
                                Part p = parts.get(tp.partition());
                                if (p != null) {
                                    p.sent = null;
                                }
                            }
                        }
                    });
                }
            }
            if (loopMs > 0) {
                stop.await(loopMs, TimeUnit.MILLISECONDS); // the slow part of the loop (slow-loop case)
            }
        }
        event("stopping", List.of());
        consumer.close(); // onPartitionsRevoked waits for the in-flight records and commits, then it leaves
        event("closed", List.of());
    }

    void dump(Path out) throws IOException {
        pool.shutdownNow();
        StringBuilder sb = new StringBuilder();
        sb.append("{\"name\": \"").append(name).append("\", \"client\": \"java\", \"protocol\": \"")
                .append(opts.get("protocol")).append("\", \"discarded\": ").append(discarded.get())
                .append(", \"refused_delays\": 0, \"events\": [");
        synchronized (this) {
            for (int i = 0; i < events.size(); i++) {
                Object[] e = events.get(i);
                sb.append(i == 0 ? "" : ", ").append('[').append(e[0]).append(", \"").append(e[1])
                        .append("\", ").append(e[2]).append(']');
            }
        }
        sb.append("], \"processed\": [");
        synchronized (processed) {
            for (int i = 0; i < processed.size(); i++) {
                double[] r = processed.get(i);
                sb.append(i == 0 ? "" : ", ").append('[').append(r[0]).append(", ").append((long) r[1])
                        .append(", ").append((long) r[2]).append(']');
            }
        }
        sb.append("], \"slow_polls\": [");
        for (int i = 0; i < slowPolls.size(); i++) {
            double[] r = slowPolls.get(i);
            sb.append(i == 0 ? "" : ", ").append('[').append(r[0]).append(", ").append(r[1]).append(']');
        }
        sb.append("]}");
        Path tmp = Paths.get(out.toString().replaceAll("\\.json$", "") + ".tmp");
        Files.writeString(tmp, sb.toString(), StandardCharsets.UTF_8);
        Files.move(tmp, out, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opts = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value pairs, got " + args[i]);
            }
            opts.put(args[i].substring(2), args[i + 1]);
        }
        for (String key : List.of("protocol", "bootstrap-servers", "topic", "group", "name", "out", "work-ms",
                "slow-every", "slow-ms", "in-flight", "workers", "poll-timeout", "commit-interval",
                "max-poll-interval-ms", "loop-ms")) {
            if (!opts.containsKey(key)) {
                throw new IllegalArgumentException("missing --" + key);
            }
        }
        SlowLoopMember member = new SlowLoopMember(opts);
        CountDownLatch stop = new CountDownLatch(1);
        CountDownLatch finished = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown(); // SIGTERM: stop like the Python members (close, then write the log)
            try {
                finished.await(90, TimeUnit.SECONDS);
            } catch (InterruptedException exc) {
                Thread.currentThread().interrupt();
            }
        }));
        try {
            member.runLoop(stop);
        } catch (Exception exc) {
            exc.printStackTrace(new PrintWriter(System.err, true));
        } finally {
            member.dump(Paths.get(opts.get("out")));
            System.out.flush();
            finished.countDown();
        }
        System.exit(0);
    }
}
