-- TPC-H Q6 (forecasting revenue change). Changed: the date + INTERVAL and 0.06 +- 0.01 written out.
CREATE MATERIALIZED VIEW q6 AS
SELECT sum(l_extendedprice * l_discount) AS revenue
FROM lineitem
WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01'
  AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24;
