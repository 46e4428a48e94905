package testbed.flink.traffic;

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
 * A vehicle's mean speed in 10 s tumbling event-time windows: the geodesic distance between its
 * consecutive reports over their count times the report interval, as the published job computes it.
 * Kept as Flink's window operator keeps a window (state per key and window, an event-time timer at its
 * last millisecond), accumulated as reports arrive, so that a report is counted as the window admits it
 * (gauge countedRecords) with its latency then, which leaves out the wait for the window to close.
 */
final class SpeedWindow extends KeyedProcessFunction<String, TrafficEvent, VehicleSpeed> implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private final long sizeMs;
    private final double intervalS;
    private final OperatorCount counted = new OperatorCount("countedRecords");
    private transient MapState<Long, SpeedAcc> windows; // window end -> the vehicle's window so far
    private transient Latency latency;

    SpeedWindow(long sizeMs, double intervalS) {
        this.sizeMs = sizeMs;
        this.intervalS = intervalS;
    }

    @Override
    public void open(OpenContext openContext) {
        windows = getRuntimeContext().getMapState(new MapStateDescriptor<>("speed", Long.class, SpeedAcc.class));
        var metrics = getRuntimeContext().getMetricGroup();
        counted.register(metrics);
        latency = new Latency(metrics);
    }

    @Override
    public void processElement(TrafficEvent e, Context ctx, Collector<VehicleSpeed> out) throws Exception {
        long end = TumblingWindows.endOf(e.ts, sizeMs);
        SpeedAcc acc = windows.get(end);
        if (acc == null) {
            acc = new SpeedAcc();
            ctx.timerService().registerEventTimeTimer(end - 1);
        } else {
            acc.metres += Geodesic.distance(acc.lastLt, acc.lastLg, e.lt, e.lg);
            acc.pairs++;
        }
        acc.lastLt = e.lt;
        acc.lastLg = e.lg;
        acc.events++;
        windows.put(end, acc);
        counted.add(1);
        latency.record(e.ts);
    }

    @Override
    public void onTimer(long timestamp, OnTimerContext ctx, Collector<VehicleSpeed> out) throws Exception {
        long end = timestamp + 1;
        SpeedAcc acc = windows.get(end);
        if (acc == null) {
            return;
        }
        VehicleSpeed s = new VehicleSpeed();
        s.windowEnd = end;
        s.lp = ctx.getCurrentKey();
        s.lt = acc.lastLt;
        s.lg = acc.lastLg;
        double hours = acc.pairs * intervalS / 3600.0;
        s.avgSpeed = hours > 0 ? (int) (acc.metres / 1000.0 / hours) : 0;
        s.events = acc.events;
        out.collect(s);
        windows.remove(end);
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
