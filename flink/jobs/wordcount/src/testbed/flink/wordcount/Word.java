package testbed.flink.wordcount;

/** One word of a sentence, carrying the sentence's scheduled time for the latency. */
public class Word {
    public String word;
    public long scheduledMs;

    public Word() {}

    public Word(String word, long scheduledMs) {
        this.word = word;
        this.scheduledMs = scheduledMs;
    }
}
