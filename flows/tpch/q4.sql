-- TPC-H Q4 (order priority checking). Changed: DATE '1993-07-01' + INTERVAL '3' MONTH written as the
-- date it is; no ORDER BY.
CREATE MATERIALIZED VIEW q4 AS
SELECT o_orderpriority, count(*) AS order_count
FROM orders
WHERE o_orderdate >= DATE '1993-07-01' AND o_orderdate < DATE '1993-10-01'
  AND EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND l_commitdate < l_receiptdate)
GROUP BY o_orderpriority;
