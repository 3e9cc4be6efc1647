package flechtwerk.bench;

import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The workload of eosbench as a Kafka Streams application: per input record,
 * count its key in a persistent (RocksDB, changelogged) store and emit two
 * outputs with the same key and the input's headers, "count=N" and
 * "double=2N", under exactly_once_v2.
 *
 * <p>Arguments: bootstrap servers, application id (the consumer group),
 * input topic, output topic, state directory, commit interval in ms, stream
 * threads. It prints "first" on stdout when it processes its first record
 * (eosbench starts its drain timer there) and runs until it is terminated.
 */
public final class Counter {
  private static final String STORE = "counts";

  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println("usage: Counter BOOTSTRAP APPLICATION_ID IN OUT STATE_DIR COMMIT_INTERVAL_MS THREADS");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[5]));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(args[6]));
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    // The bench's processors all poll at most 500 records (the Kafka
    // default, and the runner's MaxPollRecords).
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 500);

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(Stores.keyValueStoreBuilder(
        Stores.persistentKeyValueStore(STORE), Serdes.ByteArray(), Serdes.Long()).withCachingEnabled());
    b.stream(args[2], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .process(() -> new Count(), STORE)
        .to(args[3], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch done = new CountDownLatch(1);
    // A failed stream thread shuts the whole client down (no exit from the
    // thread: the shutdown hook's close would wait for it); main then exits
    // with 1, and eosbench reports the row as failed.
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        done.countDown();
      }
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      done.countDown();
    }));
    streams.start();
    done.await();
    if (streams.state() == KafkaStreams.State.ERROR) {
      System.exit(1);
    }
  }

  private static volatile boolean started;

  private static final class Count implements Processor<byte[], byte[], byte[], byte[]> {
    private ProcessorContext<byte[], byte[]> ctx;
    private KeyValueStore<byte[], Long> counts;

    @Override
    public void init(ProcessorContext<byte[], byte[]> ctx) {
      this.ctx = ctx;
      this.counts = ctx.getStateStore(STORE);
    }

    @Override
    public void process(Record<byte[], byte[]> r) {
      if (!started) {
        started = true;
        System.out.println("first");
        System.out.flush();
      }
      Long n = counts.get(r.key());
      long c = (n == null ? 0 : n) + 1;
      counts.put(r.key(), c);
      ctx.forward(r.withValue(("count=" + c).getBytes(StandardCharsets.UTF_8)));
      ctx.forward(r.withValue(("double=" + 2 * c).getBytes(StandardCharsets.UTF_8)));
    }
  }
}
