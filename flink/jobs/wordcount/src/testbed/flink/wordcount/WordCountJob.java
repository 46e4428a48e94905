package testbed.flink.wordcount;

import java.nio.file.Path;
import java.util.Random;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.util.ParameterTool;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

/**
 * WordCount as in the Daedalus paper's Flink job: sentences from a source, split into words, a
 * running count per word (keyed). Arguments: --schedule FILE (seconds rate per line) and optionally
 * --words-per-sentence (8), --vocabulary (10000), --zipf (1.0: word frequencies ~ 1/rank),
 * --sentences (4096 distinct sentences, cycled), --seed (1), --work-rounds (0: rounds of WordWork's
 * computation per counted word, the CPU mode's cost) and --wait-us (0: time waited per counted word), to set a TaskManager's capacity, and
 * --ledger FILE (where the source counts what restarts made it emit again). The source runs at parallelism 1
 * (max parallelism 1, so reactive mode keeps it there); split and count scale with the cluster.
 */
public final class WordCountJob {
    public static void main(String[] args) throws Exception {
        ParameterTool params = ParameterTool.fromArgs(args);
        RateSchedule schedule = RateSchedule.read(Path.of(params.getRequired("schedule")));
        String[] sentences = sentences(params.getInt("sentences", 4096), params.getInt("words-per-sentence", 8),
                params.getInt("vocabulary", 10000), params.getDouble("zipf", 1.0), params.getLong("seed", 1));
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        RecordFactory<Sentence> records = (k, at) -> new Sentence(at, sentences[(int) (k % sentences.length)]);
        env.fromSource(new ScheduledSource<>(schedule, records, TypeInformation.of(Sentence.class), params.get("ledger"), false),
                        WatermarkStrategy.<Sentence>noWatermarks(), "source")
                .setParallelism(1).setMaxParallelism(1).uid("source")
                .rebalance()
                // never chained to the source (Flink chains them across the rebalance while both
                // run at parallelism 1), so that the splitting scales with the cluster
                .flatMap(new Splitter()).name("split").uid("split").disableChaining()
                .keyBy(w -> w.word)
                .process(new WordCounter(params.getLong("work-rounds", 0), params.getLong("wait-us", 0))).name("count").uid("count")
                .sinkTo(new DiscardingSink<>()).name("discard").uid("discard");
        env.execute("testbed-wordcount");
    }

    /** Fixed sentences of n words drawn from a Zipf-distributed vocabulary (deterministic by seed). */
    static String[] sentences(int count, int words, int vocabulary, double zipf, long seed) {
        double[] cdf = new double[vocabulary];
        double sum = 0;
        for (int i = 0; i < vocabulary; i++) {
            sum += 1.0 / Math.pow(i + 1, zipf);
            cdf[i] = sum;
        }
        Random random = new Random(seed);
        String[] out = new String[count];
        for (int s = 0; s < count; s++) {
            StringBuilder b = new StringBuilder();
            for (int w = 0; w < words; w++) {
                int i = java.util.Arrays.binarySearch(cdf, random.nextDouble() * sum);
                b.append(w == 0 ? "" : " ").append("w").append(i < 0 ? -i - 1 : i);
            }
            out[s] = b.toString();
        }
        return out;
    }

    static final class Splitter implements FlatMapFunction<Sentence, Word> {
        private static final long serialVersionUID = 1L;

        @Override
        public void flatMap(Sentence sentence, Collector<Word> out) {
            for (String w : sentence.text.split(" ")) {
                out.collect(new Word(w, sentence.scheduledMs));
            }
        }
    }
}
