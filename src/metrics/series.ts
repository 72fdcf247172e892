import { Counter, Histogram, type Registry } from 'prom-client';

/**
 * Metrics whose series are plain numbers on the request path, read by prom-client when scraped:
 * prom-client's `inc(labels)` and `observe(labels, value)` build and validate a key from the labels on
 * every call, a visible share of a small request's CPU (bench/RESULTS.md). A caller keeps its series.
 */

type Labels = Record<string, string>;

/** One counter series: `add` on the hot path, folded into the counter at the next scrape. */
export interface CounterSeries {
  add(value?: number): void;
}

/** A counter whose series are kept apart (seriesFor) and handed to prom-client when scraped. */
export class SeriesCounter extends Counter<string> {
  private readonly pending: { labels: Labels; value: number }[];

  constructor(config: { name: string; help: string; labelNames: readonly string[]; registers: Registry[] }) {
    const pending: { labels: Labels; value: number }[] = [];
    super({
      ...config,
      collect() {
        for (const series of pending) {
          this.inc(series.labels, series.value);
          series.value = 0;
        }
      },
    });
    this.pending = pending;
  }

  seriesFor(labels: Labels): CounterSeries {
    const series = { labels, value: 0 };
    this.pending.push(series);
    // Shown at 0 from the first scrape on, as prom-client's own series are once touched.
    this.inc(labels, 0);
    return { add: (value = 1) => void (series.value += value) };
  }
}

/** One histogram series: counts per bucket, sum and count, as plain numbers. */
export class HistogramSeries {
  count = 0;
  sum = 0;
  /** Observations per bucket (not cumulative); the last one is +Inf. */
  readonly buckets: Float64Array;

  constructor(
    readonly labels: Labels,
    private readonly bounds: readonly number[],
  ) {
    this.buckets = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    this.count++;
    this.sum += value;
    const { bounds } = this;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.buckets[i]!++;
  }
}

/** What the registry reads of a metric (prom-client's internal shape: labels apart from the series' own). */
interface Sample {
  labels: Labels;
  sharedLabels: Labels;
  value: number;
  metricName: string;
}

/** A histogram whose series are HistogramSeries (seriesFor); its samples are built when scraped. */
export class SeriesHistogram extends Histogram<string> {
  private readonly series: HistogramSeries[] = [];
  private readonly bounds: readonly number[];
  private readonly identity: { name: string; help: string };

  constructor(config: { name: string; help: string; labelNames?: readonly string[]; buckets: number[]; registers: Registry[] }) {
    super({ ...config, labelNames: config.labelNames ?? [] });
    this.bounds = [...config.buckets].sort((a, b) => a - b);
    this.identity = { name: config.name, help: config.help };
  }

  seriesFor(labels: Labels): HistogramSeries {
    const series = new HistogramSeries(labels, this.bounds);
    this.series.push(series);
    return series;
  }

  /** What the registry formats (it prefers this to get(), which prom-client builds on it too). */
  getForPromString(): { name: string; help: string; type: string; aggregator: string; values: Sample[] } {
    const { name } = this.identity;
    const values: Sample[] = [];
    for (const series of this.series) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += series.buckets[i]!;
        values.push({ labels: { le: String(bound) }, sharedLabels: series.labels, value: cumulative, metricName: `${name}_bucket` });
      });
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: series.labels, value: series.count, metricName: `${name}_bucket` },
        { labels: {}, sharedLabels: series.labels, value: series.sum, metricName: `${name}_sum` },
        { labels: {}, sharedLabels: series.labels, value: series.count, metricName: `${name}_count` },
      );
    }
    return { ...this.identity, type: 'histogram', aggregator: 'sum', values };
  }
}
