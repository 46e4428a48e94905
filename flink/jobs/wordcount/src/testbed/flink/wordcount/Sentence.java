package testbed.flink.wordcount;

/** One source record: a sentence and the wall-clock time (ms) the schedule had it due. */
public class Sentence {
    public long scheduledMs;
    public String text;

    public Sentence() {}

    public Sentence(long scheduledMs, String text) {
        this.scheduledMs = scheduledMs;
        this.text = text;
    }
}
