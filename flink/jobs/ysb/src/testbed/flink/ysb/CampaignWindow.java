package testbed.flink.ysb;

import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import testbed.flink.jobs.Latency;
import testbed.flink.jobs.OperatorCount;
import testbed.flink.jobs.TumblingWindows;

/**
 * Views per campaign in 10 s tumbling event-time windows, as Flink's window operator keeps them (a
 * count per key and window in keyed state, an event-time timer at the window's last millisecond that
 * emits and clears it), written out so that a view is counted as the window admits it: gauge
 * countedRecords (an OperatorCount) and the latency at admission, which leaves out the wait for the
 * window to close, as the paper's latency does.
 */
final class CampaignWindow extends KeyedProcessFunction<String, ViewAd, CampaignCount> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private final long sizeMs;
    private final OperatorCount counted = new OperatorCount("countedRecords");
    private transient MapState<Long, Long> counts; // window end -> views so far
    private transient Latency latency;

    CampaignWindow(long sizeMs) {
        this.sizeMs = sizeMs;
    }

    @Override
    public void open(OpenContext openContext) {
        counts = getRuntimeContext().getMapState(new MapStateDescriptor<>("views", Long.class, Long.class));
        var metrics = getRuntimeContext().getMetricGroup();
        counted.register(metrics);
        latency = new Latency(metrics);
    }

    @Override
    public void processElement(ViewAd v, Context ctx, Collector<CampaignCount> out) throws Exception {
        long end = TumblingWindows.endOf(v.eventTime, sizeMs);
        Long c = counts.get(end);
        if (c == null) {
            ctx.timerService().registerEventTimeTimer(end - 1);
        }
        counts.put(end, c == null ? 1L : c + 1);
        counted.add(1);
        latency.record(v.eventTime);
    }

    @Override
    public void onTimer(long timestamp, OnTimerContext ctx, Collector<CampaignCount> out) throws Exception {
        long end = timestamp + 1;
        Long c = counts.get(end);
        if (c != null) {
            out.collect(new CampaignCount(ctx.getCurrentKey(), end, c));
            counts.remove(end);
        }
    }

    @Override
    public void snapshotState(FunctionSnapshotContext context) throws Exception {
        counted.snapshot();
    }

    @Override
    public void initializeState(FunctionInitializationContext context) throws Exception {
        counted.initialize(context);
    }
}
